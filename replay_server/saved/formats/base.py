"""The one extension point for saved-run formats: a reader, and the context it reports to.

A reader claims files (`detect`, from the path and the file's first bytes) and turns the
files it claimed in one group (one command-line argument) into native records (`read`).
Adding a harness is adding one module with one reader, and listing it in `formats/__init__`.

Every reader's loop is `read_rows`: a row it finds bad raises LoadError (FILE:LINE, the
field and why), which goes to `LoadContext.bad` (that stops the load unless the user asked
to skip bad lines); a row it deliberately leaves out (loglikelihood rows, truncated prompts)
goes to `LoadContext.skip` with its reason, so that nothing is dropped without a count.

Readers make their records with `records.make_record` (checked as a saved line is, with
FILE:LINE errors) and share the helpers below: `dig` and `read_json` for run metadata,
`text_response` for sources that saved texts but no response body, `synthetic_id` for
sources that saved no response id, `usage` from saved counts only, and
`strip_litellm_provider` for harnesses that talk through litellm.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import orjson

from ...errors import LoadError, shown_file
from ...paths import CHAT_PATH
from ...settings import DEFAULT_MAX_LINE
from ..jsonl import iter_jsonl, not_json, parse_line
from ..record import Record


class Reader(Protocol):
    """One harness's saved files, read as they are (`formats/*.py`, one module each).

    A reader knows its harness's files and nothing else: it claims them, rebuilds the
    request the harness sent and the answer it got, and makes records with `make_record`.
    Everything after (keys, samples, replies) is the same for every harness, so adding a
    harness is adding a reader."""

    name: str
    # the files `detect` claims, in a phrase: told to a user whose file no reader claims
    expects: str

    def detect(self, path: Path, head: bytes) -> bool:
        """Whether this reader claims the file. `head` is its first line (capped)."""
        ...

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        """Native records from the files this reader claimed in one group."""
        ...


class Deferred(Protocol):
    """A reader's records that depend on every file of the load, not one group's (lm-eval's
    perplexity windows: one value per window for every document that sends it)."""

    def records(self, ctx: LoadContext) -> Iterator[Record]:
        """The records, once every group is read."""
        ...


@dataclass
class LoadContext:
    """How a load goes, and what it met: every reader reports here, so that a bad line
    stops every load the same way (or, with --skip-bad-lines, is listed), and every row a
    reader leaves out on purpose is counted with its reason. Nothing is dropped unsaid."""

    skip_bad_lines: bool = False
    max_line: int = DEFAULT_MAX_LINE
    # The run's tokenizer (local_tokenizer.LocalTokenizer), when the user gave one (--tokenizer):
    # lm-eval records are then keyed by token ids too, and loglikelihood rows are read.
    tokenizer: Any = None
    on_progress: Callable[[int], None] = lambda n: None
    bad_lines: list[LoadError] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_examples: dict[str, list[str]] = field(default_factory=dict)
    # by reader name: records made after the last group (saved.loader.read)
    deferred: dict[str, Deferred] = field(default_factory=dict)

    def bad(self, error: LoadError) -> None:
        """A line that cannot be read: stop the load, or note it when skipping is allowed."""
        if not self.skip_bad_lines:
            raise error
        self.bad_lines.append(error)

    def skip(self, reason: str, where: str) -> None:
        """A row left out on purpose (not an error): counted, with a few examples kept,
        each named as an error names its file (an object's URL, never its cached copy)."""
        self.skipped[reason] += 1
        examples = self.skipped_examples.setdefault(reason, [])
        if len(examples) < 3:
            examples.append(shown_file(where))

    def progress(self, nbytes: int) -> None:
        self.on_progress(nbytes)


Row = TypeVar("Row")
Made = TypeVar("Made")


def read_rows(rows: Iterable[Row], read: Callable[[Row], Made | None], ctx: LoadContext,
              place: Callable[[Row], str] | None = None) -> Iterator[Made]:
    """What `read` makes of each row, in order, leaving out None (a row it left out, having
    told `ctx.skip` why). A row that `read` finds bad raises LoadError, naming the file, the
    line and the field (`place` names the row where a file has no lines): the error goes to
    `ctx.bad`, and the row yields nothing, whatever `read` would have made of it (a reader
    that makes several records of a row returns them as a list)."""
    for row in rows:
        try:
            made = read(row)
        except LoadError as error:
            if place is not None and error.line is None and error.place is None:
                error = LoadError(error.file, None, error.reason, error.field, place(row))
            ctx.bad(error)
            continue
        if made is not None:
            yield made


def head_keys(head: bytes) -> set[str]:
    """The keys of a file's first line when it is a JSON object (for `detect`), else none."""
    try:
        obj = orjson.loads(head)
    except orjson.JSONDecodeError:
        return set()
    return set(obj) if isinstance(obj, dict) else set()


def json_lines(path: Path, ctx: LoadContext) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each non-blank line of a JSONL file, reporting
    progress; a line that is not JSON goes to `ctx.bad` (which stops the load unless the
    user asked to skip bad lines)."""
    file = str(path)
    unreported = 0  # progress is reported a megabyte at a time, not line by line
    for line, raw, size in iter_jsonl(path, ctx.max_line):
        unreported += size
        if unreported >= 1 << 20:
            ctx.progress(unreported)
            unreported = 0
        if not raw:
            continue
        try:
            value = parse_line(raw, file, line, ctx.max_line)
        except LoadError as error:
            ctx.progress(unreported)
            unreported = 0
            ctx.bad(error)
            continue
        yield line, value
    ctx.progress(unreported)


def read_side_file(path: Path, ctx: LoadContext, missing: LoadError | None = None
                   ) -> bytes | None:
    """A small side file's bytes (run metadata, a config), counted as progress; None when it
    is missing (reported as `missing`, if given) or cannot be read (reported)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if missing is not None:
            ctx.bad(missing)
        return None
    except OSError as e:
        ctx.bad(LoadError(str(path), None, f"cannot read: {e.strerror or e}"))
        return None
    ctx.progress(len(data))
    return data


def read_json(path: Path, ctx: LoadContext) -> dict[str, Any] | None:
    """A small JSON side file (run metadata), or None when it is missing or not an object."""
    data = read_side_file(path, ctx)
    if data is None:
        return None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        ctx.bad(LoadError(str(path), e.lineno, not_json(e)))
        return None
    return obj if isinstance(obj, dict) else None


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]..., or None where a step is missing or not an object."""
    for step in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(step)
    return obj


def fingerprint(value: Any) -> bytes:
    """16 bytes of BLAKE2b of `value` as JSON with sorted keys: how a reader tells a row
    that repeats an earlier one's content (read once) from one that differs."""
    return hashlib.blake2b(orjson.dumps(value, option=orjson.OPT_SORT_KEYS),
                           digest_size=16).digest()


def saved_answer(response: dict[str, Any] | None, unusable: str | None) -> list[Any]:
    """What two rows must both hold to have saved the same answer: the choices but their
    indexes, and why it is unusable."""
    choices = [{k: v for k, v in c.items() if k != "index"}
               for c in (response or {}).get("choices", [])]
    return [choices, unusable]


def synthetic_id(harness: str, *parts: object) -> str:
    """A deterministic response id for sources that saved none."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=6).hexdigest()
    return f"replay-{harness}-{digest}"


def usage(prompt: Any, completion: Any) -> dict[str, int | None] | None:
    """A usage object from the saved counts only: a count the source did not save is null."""
    prompt = prompt if isinstance(prompt, int) and not isinstance(prompt, bool) else None
    completion = (completion if isinstance(completion, int) and not isinstance(completion, bool)
                  else None)
    if prompt is None and completion is None:
        return None
    total = prompt + completion if prompt is not None and completion is not None else None
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def text_response(endpoint: str, texts: Sequence[str | None],
                  finish_reasons: Sequence[str | None] | None = None,
                  usage: dict[str, Any] | None = None, *, id: str, model: str | None,
                  reasonings: Sequence[str | None] | None = None,
                  refusals: Sequence[str | None] | None = None,
                  tool_calls: Sequence[list[Any] | None] | None = None,
                  logprobs: Sequence[Any] | None = None,
                  created: int | None = None) -> dict[str, Any]:
    """A response body rebuilt from what a source saved instead of one: one choice per
    text, in order. What was not saved is null (`finish_reason`, `usage`, `created`,
    `logprobs`); a chat message gets `reasoning`, `refusal` and `tool_calls` only when
    saved."""
    n = len(texts)
    chat = endpoint == CHAT_PATH
    choices = []
    for i, text in enumerate(texts):
        choice: dict[str, Any] = {"index": i}
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if reasonings is not None and _at(reasonings, i, n) is not None:
                message["reasoning"] = reasonings[i]
            if refusals is not None and _at(refusals, i, n) is not None:
                message["refusal"] = refusals[i]
            if tool_calls is not None and _at(tool_calls, i, n) is not None:
                message["tool_calls"] = tool_calls[i]
            choice["message"] = message
        else:
            choice["text"] = text
        choice["logprobs"] = _at(logprobs, i, n) if logprobs is not None else None
        choice["finish_reason"] = (_at(finish_reasons, i, n) if finish_reasons is not None
                                   else None)
        choices.append(choice)
    return {"id": id, "object": "chat.completion" if chat else "text_completion",
            "created": created, "model": model, "choices": choices, "usage": usage}


def _at(values: Sequence[Any], i: int, n: int) -> Any:
    if len(values) != n:
        raise ValueError(f"{len(values)} values for {n} choices")
    return values[i]


# litellm provider prefixes (`litellm.provider_list`) of OpenAI-compatible routes and the
# common hosted ones: litellm sends the model name without them.
LITELLM_PROVIDERS = frozenset({
    "openai", "custom_openai", "text-completion-openai", "hosted_vllm", "vllm", "litellm_proxy",
    "azure", "azure_ai", "anthropic", "together_ai", "fireworks_ai", "deepinfra", "groq",
    "mistral", "deepseek", "openrouter", "gemini", "vertex_ai", "bedrock", "xai", "cohere",
    "perplexity", "nvidia_nim", "cerebras", "sambanova", "ollama", "ollama_chat", "lm_studio",
    "huggingface", "databricks", "watsonx", "anyscale",
})


def strip_litellm_provider(model: str) -> str:
    """The model name litellm sends for `model`: without a known provider prefix."""
    provider, sep, rest = model.partition("/")
    return rest if sep and rest and provider in LITELLM_PROVIDERS else model
