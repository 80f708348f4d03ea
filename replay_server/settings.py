"""Serving settings: typed, defaulted and documented in one place.

The CLI builds its `serve` options from `SETTINGS` (flag, help, environment variable), and
the docs' table of options is generated from it, so the three cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

ENV_PREFIX = "REPLAY_SERVER_"
# The longest saved line read by default (--max-line-size): a bigger one is a bad line,
# named, rather than gigabytes of memory.
DEFAULT_MAX_LINE = 128 * 1024 * 1024
DEFAULT_MAX_BODY = 16 * 1024 * 1024
DEFAULT_READ_TIMEOUT = 60.0
# Batch inputs (issue 32): OpenAI takes files of up to 200 MB, Anthropic bodies of 256 MB.
DEFAULT_MAX_UPLOAD = 256 * 1024 * 1024
DEFAULT_MAX_BATCHES = 10_000


def _setting(default: Any, help: str, *, secret: bool = False, **extra: Any) -> Any:
    # a secret is left out of the settings' repr, so that no log line can show it
    return field(default=default, repr=not secret, metadata={"help": help, **extra})


@dataclass(frozen=True)
class Settings:
    host: str = _setting("127.0.0.1", "Address to bind. Use 0.0.0.0 only on a trusted network.")
    port: int = _setting(8000, "Port to listen on (0 picks a free one).")
    model_alias: tuple[str, ...] = _setting(
        (), "Serve saved model SAVED under the name CLIENT (CLIENT=SAVED; repeatable; "
        "CLIENT may be '*', matching any name).", multiple=True, metavar="CLIENT=SAVED")
    strict: bool = _setting(
        False, "Also require the sampling parameters (temperature, max_tokens, stop, seed, "
        "...) to equal the saved request's; a difference fails with replay_params_mismatch. "
        "Under `run`, a tokenizer call (vLLM's /tokenize, ...) that neither a recording nor "
        "--tokenizer answers then fails the run too.")
    allow_ambiguous: bool = _setting(
        False, "When instances that share a prompt saved different generations, serve them "
        "in saved order instead of failing with replay_ambiguous.")
    skip_bad_lines: bool = _setting(
        False, "Start even if some saved lines cannot be read; they are skipped and reported.")
    tokenizer: str | None = _setting(
        None, "The run's tokenizer, for lm-eval runs sent as token ids: a local folder with "
        "tokenizer.json, or the file (what lm-eval's tokenizer= loaded; never downloaded). "
        "With it, token-id prompts and loglikelihood (multiple-choice) requests are answered "
        "from lm-eval samples files. Needs the `tokens` extra.", metavar="PATH")
    max_line_size: int = _setting(
        DEFAULT_MAX_LINE, "Longest saved line read, in bytes; a longer one is a bad line "
        "(named with its file and line), never gigabytes of memory.")
    api_key: str | None = _setting(
        None, "Require the key on every route but /health: `Authorization: Bearer KEY`, "
        "or where Anthropic's and Google's clients send it (`x-api-key`, `x-goog-api-key`, "
        "`?key=`). Prefer the environment variable: a command line is visible to other "
        "users.",
        metavar="KEY")
    max_body_size: int = _setting(
        DEFAULT_MAX_BODY, "Largest request body accepted, in bytes; larger ones get 413.")
    max_upload_size: int = _setting(
        DEFAULT_MAX_UPLOAD, "Largest batch input kept, in bytes: a file uploaded to "
        "/v1/files, or a body sent to /v1/messages/batches; larger ones get 413. Batch "
        "inputs and outputs are held in memory only, until deleted or until the server "
        "stops.")
    max_batches: int = _setting(
        DEFAULT_MAX_BATCHES, "Most uploaded files, and most batches, held at once; past "
        "it, an upload or a new batch gets 413 (delete those no longer needed; OpenAI's "
        "batches cannot be deleted: restart).")
    read_timeout: float = _setting(
        DEFAULT_READ_TIMEOUT, "Seconds a client has to send a whole request (headers and "
        "body) from its first byte; a slower one is disconnected, so that trickling "
        "clients cannot hold connections forever.")
    workers: int = _setting(
        1, "Worker processes, sharing the run's index file (one given, or the one saved "
        "files are served through, kept in the cache); a run whose prompts saved several "
        "different samples "
        "(repeats, handed out one by one) needs --state too.")
    state: str | None = _setting(
        None, "Keep the replay's state (the repeats cursors, the counts, the misses) in "
        "Redis or Valkey at this URL (redis://HOST:PORT/DB, rediss://, unix://), shared "
        "by every worker and every replica serving the same run: each saved sample is "
        "served once across all of them, and /replay/status, /replay/misses, /replay/reset "
        "and `run`'s verdict cover them all (docs/state.md). Needs the `state` extra. "
        "Credentials in the URL are used, never printed.", secret=True, metavar="URL")
    state_prefix: str | None = _setting(
        None, "The prefix of the keys --state keeps (default: replay-server: and a digest "
        "of the run's shape, so that different runs on one store never meet).",
        metavar="NAME")
    access_log: bool = _setting(False, "Log every request (uvicorn's access log, with no "
                                "key-like query parameter; it costs throughput).")
    log_level: str = _setting("info", "Log level: debug, info, warning or error.",
                              choices=("debug", "info", "warning", "error"))
    upstream: str | None = _setting(
        None, "An OpenAI- or Anthropic-compatible server (with or without /v1) that answers "
        "requests for a model the saved runs do not have (a judge), as `record` forwards "
        "them; each exchange delivered is appended to --out. A saved model is never "
        "forwarded. Credentials in the URL (user:password@, key=) are used, never saved "
        "nor printed.",
        metavar="URL")
    out: str | None = _setting(
        None, "The JSONL file that forwarded exchanges are appended to, as native records "
        "(needs --upstream); serve it with the saved runs to replay the judge too.",
        metavar="FILE")
    upstream_models: str | None = _setting(
        None, "Which models may go to --upstream: shell-style patterns, comma-separated "
        "(default: any model the saved runs do not have).", metavar="PATTERN[,PATTERN...]")
    upstream_api_key: str | None = _setting(
        None, "The key --upstream gets, in the form its API reads (OpenAI's: `Authorization: "
        "Bearer KEY`; Anthropic's: `x-api-key: KEY`). No key a client sends goes upstream, "
        "in any header or query parameter; without this, none does. Never written down "
        "nor logged. Prefer the environment variable.", secret=True, metavar="KEY")

    def __post_init__(self) -> None:
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("--api-key (or REPLAY_SERVER_API_KEY) is set but empty: that "
                             "would turn authentication off; give a key, or unset it")
        for name in ("max_body_size", "max_line_size", "read_timeout", "workers",
                     "max_upload_size", "max_batches"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{flag(name)} must be positive")
        self._check_upstream()
        if self.state_prefix is not None and self.state is None:
            raise ValueError("--state-prefix needs --state")

    def _check_upstream(self) -> None:
        if (self.upstream is None) != (self.out is None):
            raise ValueError("--upstream and --out go together: every exchange forwarded "
                             "upstream is saved, so that the next rescoring replays it")
        if self.upstream is None and (self.upstream_models or self.upstream_api_key):
            raise ValueError("--upstream-models and --upstream-api-key need --upstream")
        if self.upstream is not None and self.workers > 1:
            raise ValueError("--upstream needs one worker: one process appends to --out")
        if self.upstream_models is not None and not self.upstream_patterns():
            raise ValueError("--upstream-models is set but names no pattern")

    def upstream_patterns(self) -> tuple[str, ...]:
        """--upstream-models as a tuple of shell-style patterns (empty: any model)."""
        return tuple(p.strip() for p in (self.upstream_models or "").split(",") if p.strip())

    def aliases(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in self.model_alias:
            client, sep, saved = item.partition("=")
            if not sep or not client or not saved:
                raise ValueError(f"--model-alias {item!r}: expected CLIENT=SAVED")
            out[client] = saved
        return out


SETTINGS = fields(Settings)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def envvar(name: str) -> str:
    return ENV_PREFIX + name.upper()


def markdown_table() -> str:
    """The table of `serve` options (docs/reference/settings.md), generated from SETTINGS."""
    rows = ["| flag | environment variable | default | what it does |",
            "| --- | --- | --- | --- |"]
    for setting in SETTINGS:
        default = setting.default
        shown = ("off" if default is False else "none" if default in ((), None)
                 else f"`{default}`")
        rows.append(f"| `{flag(setting.name)}` | `{envvar(setting.name)}` | {shown} | "
                    f"{setting.metadata['help']} |")
    return "\n".join(rows)
