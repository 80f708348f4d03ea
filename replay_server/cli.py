"""The `replay-server` command line: parse, then call one function. No logic here.

Only `serve`, `record` and `run` need the web stack (FastAPI, uvicorn, httpx): they import
it when they run, so that `inspect`, `convert`, `index` and `--help` start quickly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import MISSING
from pathlib import Path
from typing import Any, NoReturn

import click
import orjson

from . import __version__
from .commands import cache as caching
from .commands import exits
from .commands import inspect as inspecting
from .commands.command import MAX_ATTEMPTS
from .commands.convert import convert_paths
from .commands.index import build_index as write_index
from .commands.logs import log_to_stderr
from .errors import LoadError
from .settings import DEFAULT_MAX_LINE, SETTINGS, Settings, envvar, flag

F = Callable[..., Any]


def _say(line: str) -> None:
    """Tell the user, on stderr. A line that cannot be written is dropped, and so is every
    later one (stderr goes to /dev/null): no one is left to read them (Ctrl-C to `run ...
    | tee` ends tee too; a terminal that closes sends SIGHUP and takes stderr along), and
    the command must go on: `run` still stops COMMAND whole and exits with its status."""
    try:
        click.echo(line, err=True)
    except OSError:
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, sys.stderr.fileno())  # (what the stream still holds goes there too)
        os.close(quiet)


def settings_options(*, leave_out: tuple[str, ...] = (), **defaults: Any
                     ) -> Callable[[F], F]:
    """One click option per Settings field: flag, type, default, help and env variable.
    `defaults` overrides a field's default for one command; `leave_out` names fields the
    command does not take."""
    return lambda command: _add_settings_options(command, defaults, leave_out)


def _add_settings_options(command: F, defaults: dict[str, Any], leave_out: tuple[str, ...]
                          ) -> F:
    for setting in reversed(SETTINGS):
        if setting.name in leave_out:
            continue
        meta = setting.metadata
        default = defaults.get(setting.name, setting.default)
        default = default if default is not MISSING else None
        kwargs: dict[str, Any] = {"help": meta["help"], "envvar": envvar(setting.name),
                                  "show_envvar": True}
        if setting.type == "bool":
            kwargs.update(is_flag=True, default=default)
        elif meta.get("multiple"):
            kwargs.update(multiple=True, metavar=meta.get("metavar"))
        else:
            kwargs.update(default=default, show_default=default is not None)
            if "metavar" in meta:
                kwargs["metavar"] = meta["metavar"]
            if "choices" in meta:
                kwargs["type"] = click.Choice(meta["choices"])
            elif setting.type == "int":
                kwargs["type"] = int
            elif setting.type == "float":
                kwargs["type"] = float
        command = click.option(flag(setting.name), setting.name, **kwargs)(command)
    return command


def _settings(options: dict[str, Any]) -> Settings:
    """Settings from parsed options, with logging set up as they say."""
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, tuple | list) else v
                              for k, v in options.items()}
    if values.get("api_key") is None and os.environ.get(envvar("api_key")) == "":
        values["api_key"] = ""  # click reads an empty variable as unset: refused below
    settings = Settings(**values)
    log_to_stderr(settings.log_level)
    return settings


_max_line = click.option(
    "--max-line-size", type=int, default=DEFAULT_MAX_LINE, show_default=True,
    envvar=envvar("max_line_size"), show_envvar=True,
    help="Longest saved line read, in bytes; a longer one is a bad line, named.")


_tokenizer = click.option(
    "--tokenizer", metavar="PATH", envvar=envvar("tokenizer"), show_envvar=True,
    help="The run's tokenizer (a folder with tokenizer.json, or the file): lm-eval records "
    "are keyed by token ids too, and loglikelihood rows are read.")


def _fail(error: Exception) -> NoReturn:
    _say(f"error: {error}")
    sys.exit(exits.BAD)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="replay-server")
def main() -> None:
    """Rescore saved LLM generations with any eval harness: an OpenAI-compatible server
    that answers from saved runs, exactly, and fails loudly on anything it did not save."""


@main.command(epilog=exits.epilog("serve"))
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@settings_options()
def serve(paths: tuple[str, ...], **options: Any) -> None:
    """Serve the saved runs in PATHS (files or directories) over the OpenAI API.

    PATHS may be URLs too (s3://bucket/prefix/, gs://, hf://, https://: the `objects`
    extra), fetched into a local cache ($REPLAY_SERVER_CACHE), as every command does.

    Reads, as they are: replay-server records (.jsonl, from `record` or `convert`), OpenAI
    Batch input + output files, lm-evaluation-harness --log_samples output, inspect_ai
    logs (.eval, .json), olmo-eval and oe-eval output directories, lighteval
    --save-details output (needs the `parquet` extra), evalscope work directories; or one
    index file (`replay-server index`). Saved files are served through an index built
    the first time and kept in the cache (`replay-server cache`), opened again at every
    later start while they are the same. Point any harness at it with OPENAI_BASE_URL=http://HOST:PORT/v1.
    With --upstream URL --out FILE, a request for a model the saved runs lack (a judge)
    goes to URL and is saved to FILE; a saved model is never forwarded.
    """
    from .commands import serve as server

    try:
        settings = _settings(options)
        server.serve(paths, settings, _say)
    except (LoadError, ValueError, OSError) as error:
        _fail(error)
    except KeyboardInterrupt:
        _say("replay-server: stopped")


@main.command(epilog=exits.epilog("inspect"))
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--skip-bad-lines", is_flag=True,
              help="Report bad lines instead of stopping at the first one (exit status 1).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@_max_line
@_tokenizer
def inspect(paths: tuple[str, ...], skip_bad_lines: bool, as_json: bool,
            max_line_size: int, tokenizer: str | None) -> None:
    """Show what `serve PATHS` would serve, without serving.

    Per source file and model: records loaded, rows skipped and why (with examples),
    ambiguous and unusable prompts, samples per instance.
    """
    try:
        report = inspecting.inspect_paths(paths, skip_bad_lines=skip_bad_lines,
                                          max_line=max_line_size, tokenizer=tokenizer)
    except LoadError as error:
        _fail(error)
    if as_json:
        click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo("\n".join(inspecting.render(report)))
    sys.exit(exits.SKIPPED if report["bad_lines"] else exits.DONE)


@main.command(epilog=exits.epilog("convert"))
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="The native JSONL file to write (replaced whole, never half-written).")
@click.option("--skip-bad-lines", is_flag=True,
              help="Leave out lines that cannot be read, and report them, instead of stopping.")
@_max_line
@_tokenizer
def convert(paths: tuple[str, ...], output: Path, skip_bad_lines: bool,
            max_line_size: int, tokenizer: str | None) -> None:
    """Write every saved exchange in PATHS as replay-server records (one JSONL file).

    `serve OUTPUT` then answers exactly as `serve PATHS` does.
    """
    try:
        count, ctx = convert_paths(paths, output, skip_bad_lines=skip_bad_lines,
                                   max_line=max_line_size, tokenizer=tokenizer, say=_say)
    except LoadError as error:
        _fail(error)
    _say(f"wrote {count} records to {output}")
    for bad in ctx.bad_lines:
        _say(f"  bad line left out: {bad}")
    sys.exit(exits.SKIPPED if ctx.bad_lines else exits.DONE)


@main.command(epilog=exits.epilog("record"))
@click.option("--upstream", required=True, envvar="REPLAY_SERVER_UPSTREAM", show_envvar=True,
              help="Base URL of the server to record: OpenAI-compatible (vLLM, llama.cpp, "
              "OpenAI; with or without /v1) or Anthropic's API (https://api.anthropic.com). "
              "Credentials in it (user:password@, key=) are used, never saved nor printed.")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="JSONL file the exchanges are appended to (created if missing).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8001, show_default=True, help="Port (0 picks a free one).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]), help="Log level.")
def record(upstream: str, out: Path, host: str, port: int, log_level: str) -> None:
    """Record a run through a proxy: forward to UPSTREAM, save every exchange to OUT.

    Point the harness at the printed URL, in the variable of each API the upstream
    serves: OPENAI_BASE_URL (the /v1 URL) for OpenAI's clients, ANTHROPIC_BASE_URL (the
    root, no /v1) for Anthropic's. The client keeps its own API key (OPENAI_API_KEY,
    ANTHROPIC_API_KEY): it passes through to UPSTREAM and is never saved. Each answered
    request is appended to OUT as a replay-server record, on disk before the client sees
    the end of the answer (a stream: once received whole); upstream errors and broken
    streams pass through unrecorded. An upstream that cannot be reached at start is said
    so; the proxy serves anyway (502 until it answers). Ctrl-C or SIGTERM stops it, and
    it says what it saved. `serve OUT` replays the run.
    """
    from .commands import record as recording

    _settings({"log_level": log_level})
    try:
        recording.record(upstream, out, host, port, log_level, _say)
    except (LoadError, OSError) as error:
        _fail(error)
    except KeyboardInterrupt:
        pass


@main.command("index", epilog=exits.epilog("index"))
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="The index file to write (replaced whole, never half-written).")
@click.option("--skip-bad-lines", is_flag=True,
              help="Leave out lines that cannot be read, and report them, instead of stopping.")
@_max_line
@_tokenizer
def build_index(paths: tuple[str, ...], output: Path, skip_bad_lines: bool,
                max_line_size: int, tokenizer: str | None) -> None:
    """Compile the saved runs in PATHS into one index file, once.

    `serve OUTPUT` then starts at once whatever the run's size, keeps little in memory,
    and can use several worker processes (--workers) that share the file.
    """
    try:
        code = write_index(paths, output, skip_bad_lines=skip_bad_lines,
                           max_line=max_line_size, tokenizer=tokenizer, say=_say)
    except LoadError as error:
        _fail(error)
    sys.exit(code)


@main.command("cache", epilog=exits.epilog("cache"))
@click.option("--clear", is_flag=True,
              help="Remove every index in the cache, and say what that freed (fetched "
                   "objects are kept; a server serving an index keeps its copy open).")
def cache(clear: bool) -> None:
    """Show replay-server's cache: where it is, each index that saved files were served
    through (what it was built from, its size, when it was built and last used) and the
    total; or clear the indexes.

    `serve` and `run` build an index of the saved files they are given into the cache
    the first time, and open it again at every later start while the files are the same
    (a changed file is indexed again). The cache is $REPLAY_SERVER_CACHE, else
    $XDG_CACHE_HOME/replay-server (~/.cache/replay-server).
    """
    # (what the cache holds is this command's output: stdout, as `inspect`'s report)
    sys.exit(caching.clear_indexes(click.echo) if clear else caching.show(click.echo))


@main.command("compare", epilog=exits.epilog("compare"))
@click.argument("original", type=click.Path())
@click.argument("rescored", type=click.Path())
@click.option("--report", "report", type=click.Path(dir_okay=False, path_type=Path),
              help="The report of the rescoring (`run ORIGINAL --report FILE -- ...`): pairs "
              "instances across harnesses, by which saved instance answered each request.")
@click.option("--metric", "metrics", multiple=True, metavar="ORIGINAL[=RESCORED]",
              help="Compare only this metric (repeatable), or ORIGINAL's metric with RESCORED's "
              "of another name (another harness's scorer).")
@click.option("--task", "tasks", multiple=True, metavar="ORIGINAL=RESCORED",
              help="RESCORED's task of another name is ORIGINAL's (repeatable).")
@click.option("--pair-by", type=click.Choice(["auto", "identity", "report"]), default="auto",
              show_default=True, help="identity: the harness's own instance ids (auto when "
              "both sides are one harness); report: through --report (auto otherwise).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--html", "html_to", type=click.Path(path_type=Path),
              help="Also write one self-contained HTML page: the table, a per-task chart, "
              "each flip's texts side by side.")
@_tokenizer
def compare(original: str, rescored: str, report: Path | None, metrics: tuple[str, ...],
            tasks: tuple[str, ...], pair_by: str, as_json: bool, html_to: Path | None,
            tokenizer: str | None) -> None:
    """Certify a rescoring: pair ORIGINAL's and RESCORED's scored instances and diff their
    verdicts, task by task and metric by metric.

    Reads lm-eval samples files, inspect_ai logs, olmo-eval and oe-eval predictions,
    lighteval details and evalscope reviews (a file or a run's folder each). Prints, per
    task and metric, the pairs, how many agree, each flip (both values, FILE:LINE, what
    answered), and the exact McNemar p-value (0/1 metrics) or the mean paired difference
    with a bootstrap interval.
    """
    from .commands import compare as comparing

    try:
        code = comparing.run(original, rescored, report=report, metrics=metrics, tasks=tasks,
                           pair_by=pair_by, tokenizer=tokenizer, as_json=as_json,
                           html_to=html_to, echo=click.echo)
    except (LoadError, ValueError, OSError) as error:
        _fail(error)
    sys.exit(code)


class _CommandAfterDashes(click.Command):
    """Takes everything after `--` as the command to run, untouched by option parsing."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta["command"] = args[at + 1:]
            args = args[:at]
        return super().parse_args(ctx, args)


@main.command(cls=_CommandAfterDashes, epilog=exits.epilog("run"))
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--allow-unused", is_flag=True,
              help="Pass even when saved samples were never asked for (a deliberate subset "
              "of the saved run); by default that fails with exit status 4.")
@click.option("--require-all", is_flag=True, hidden=True,
              help="The default now; kept so that older scripts still run.")
@click.option("--stop-on-miss", is_flag=True,
              help="Stop COMMAND at the first request that gets no saved generation; the "
              "report then counts only requests that got an answer (hit or error): those "
              "the stop left without one are said apart and do not fail the run again.")
@click.option("--max-attempts", type=click.IntRange(min=0), default=MAX_ATTEMPTS,
              show_default=True,
              metavar="N",
              help="Stop COMMAND (exit status 3; 6 for a judge's call under --upstream) once "
              "one distinct request has been refused N times: a harness that resends a "
              "refused request at once, forever, would never end. Far above any client's "
              "retries; 0 never stops.")
@click.option("--report", "report_to", type=click.Path(path_type=Path),
              help="Write one JSON line per distinct request to this file: answered (from "
              "which saved records) or not (the error, the nearest saved prompt, and where "
              "it first differs, with both sides quoted). Never one of PATHS (exit 2, "
              "before COMMAND runs).")
@click.option("--base-url-var", "base_url_vars", multiple=True, metavar="NAME",
              help="Also set the environment variable NAME to the replay's /v1 URL, for a "
              "harness that reads a variable of its own (repeatable); NAME_BASE_URL brings "
              "NAME_API_KEY, set to the key. inspect_ai's openai-api/SERVICE/MODEL reads "
              "SERVICE_BASE_URL (SERVICE upper-cased, - as _).")
@click.option("--server", metavar="URL",
              help="Point COMMAND at URL (a load balancer in front of `serve --state` "
              "replicas) instead of a server of run's own; needs --state, the state they "
              "share. PATHS must be the run they serve. run starts a fresh rescoring there "
              "(a reset) and its verdict covers every request any replica answered since.")
@settings_options(port=0, leave_out=("workers",))
@click.pass_context
def run(ctx: click.Context, /, paths: tuple[str, ...], allow_unused: bool, require_all: bool,
        stop_on_miss: bool, max_attempts: int, report_to: Path | None,
        base_url_vars: tuple[str, ...], server: str | None, **options: Any) -> None:
    """Serve PATHS, run a harness against it, and fail unless it rescored the saved run
    exactly: every request answered, every saved sample asked for.

    Usage: replay-server run PATHS... [OPTIONS] -- COMMAND [ARGS...]

    COMMAND runs with every base-URL variable the documented harnesses read
    (OPENAI_BASE_URL, OPENAI_API_BASE, INSPECT_EVAL_MODEL_BASE_URL, VLLM_BASE_URL, ...: the
    docs list them) set to the server, whatever they held, and their API key variables
    to a dummy key (or --api-key's). Takes every `serve` option but --workers;
    --upstream URL --out FILE sends a model the saved runs lack (a judge) to URL and
    saves it to FILE (docs/judges.md). Afterwards a
    report lists answers, each distinct request that got no saved generation (with its
    attempts, reason and nearest saved prompt), and saved generations never asked for. A
    POST /replay/reset starts the cursors over and forgets nothing the verdict counts.
    SIGINT, SIGTERM and SIGHUP stop COMMAND and everything it started, then `run`
    reports. With --state URL, the verdict covers every replica sharing that state
    (--server URL: COMMAND goes to them instead of run's own server; docs/state.md).
    """
    command = ctx.meta.get("command") or []
    if not command:
        raise click.UsageError("give the command to run after `--`")
    from .commands import run as runner

    try:
        settings = _settings(options)
        code = runner.run_command(paths, settings, command, allow_unused=allow_unused,
                                  stop_on_miss=stop_on_miss, say=_say, report_to=report_to,
                                  base_url_vars=base_url_vars, max_attempts=max_attempts,
                                  server=server)
    except (LoadError, ValueError, OSError) as error:
        _fail(error)
    sys.exit(code)


if __name__ == "__main__":
    main()
