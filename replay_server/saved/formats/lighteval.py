"""Reader for lighteval details (`lighteval endpoint litellm MODEL_CONFIG TASKS --save-details`).

    OUT/details/<model_name>/<date>/details_<task>|<shots>_<date>.parquet   one row per doc
    OUT/results/<model_name>/results_<date>.json                           the run's config

A details row holds the doc (`doc`: `id`, `task_name`, `num_samples`, `generation_size`,
`stop_sequences`, `use_logits`, ...) and the answer (`model_response`: `input`, the chat
messages exactly as sent; `text`, one raw content per sample; `reasonings`, the
`reasoning_content` litellm made of the server's reasoning field). Not saved: the HTTP
body, finish_reason, usage, the response id. So each row is one record whose request is
rebuilt the way lighteval's litellm client builds it (`models/endpoints/litellm_model.py`,
`__call_api`, then litellm's `openai` provider, as measured on the wire):

    {"model": <model_name without the litellm provider prefix>, "messages": input,
     "response_format": {"type": "text"}, "n": num_samples, "max_tokens": generation_size,
     "max_completion_tokens": generation_size, "logprobs": use_logits (provider openai
     only), "stop": stop_sequences, + generation_parameters (temperature, top_p, seed,
     frequency_penalty, repetition_penalty; stop_tokens and max_new_tokens override)}

and whose answer is the `text`s as `content` (with `reasoning` where one was saved; the
wire field name is not saved, and vLLM calls it `reasoning`), `finish_reason` and `usage`
null. `num_samples > 1` is one request with `n = num_samples`: one record, k choices.

lighteval writes `""` both for a server's null or empty content and for a call that failed
after all its retries, and keeps only `[""]` when the FIRST sample's content is empty,
dropping the others. So: a text list whose length is not `num_samples`, or a null text, is
unusable; a lone `""` with no reasoning is unusable too (an empty answer and a failed call
cannot be told apart); a `""` with reasoning, or a `""` after the first of several samples,
is a real empty answer. `model_response.input` is a list of messages, or in some versions
its JSON or Python repr (parsed with `ast.literal_eval`, never evaluated).

The results file also holds the `api_key` in clear: only the fields named here are read
from it, and nothing of it is copied. Parquet needs pyarrow (`replay-server[parquet]`).
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ...errors import LoadError, where_of
from ...paths import CHAT_PATH
from ..record import Record, make_record
from .base import (
    LoadContext,
    dig,
    read_json,
    read_rows,
    strip_litellm_provider,
    synthetic_id,
    text_response,
)

HARNESS = "lighteval"
_DATE = r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(?:\.\d+)?"
DETAILS = re.compile(rf"^details_(?P<task>.+)_(?P<date>{_DATE})\.parquet$")
RESULTS = re.compile(rf"^results_(?P<date>{_DATE})\.json$")
# The row fields read (children of the struct columns); the others are never converted.
COLUMNS: dict[str, tuple[str, ...]] = {
    "doc": ("id", "task_name", "num_samples", "generation_size", "stop_sequences",
            "use_logits"),
    "model_response": ("input", "text", "reasonings")}
REQUIRED = ("doc.id", "model_response.input", "model_response.text")
# lighteval's GenerationParameters.to_litellm_dict(): saved name -> the body field.
SAMPLING = (("max_new_tokens", "max_completion_tokens"), ("stop_tokens", "stop"),
            ("temperature", "temperature"), ("top_p", "top_p"), ("seed", "seed"),
            ("repetition_penalty", "repetition_penalty"),
            ("frequency_penalty", "frequency_penalty"))
BATCH_ROWS = 256
DUPLICATE = "row repeats a doc already read (same prompt and answer)"
NO_PYARROW = ("reading lighteval details (parquet) needs pyarrow: "
              "pip install 'replay-server[parquet]' (the Docker image: build it with "
              "--build-arg EXTRAS='tokens parquet')")


@dataclass(frozen=True)
class Run:
    """What the results file says about how requests were built."""

    model: str                      # the name litellm sends (provider prefix removed)
    provider: str                   # lighteval's `provider`: the prefix, unless configured
    sampling: dict[str, Any] = field(default_factory=dict)
    o1: bool = False                # lighteval sends no generation parameters to "o1" models


class LightevalReader:
    """lighteval details files (parquet), with the results file that names the model."""

    name = "lighteval"
    expects = ('lighteval --save-details output: '
               'details/MODEL/DATE/details_TASK_DATE.parquet')

    def detect(self, path: Path, head: bytes) -> bool:
        if DETAILS.match(path.name):
            return head.startswith(b"PAR1")
        match = RESULTS.match(path.name)
        return match is not None and any(
            (out / "details" / model / match["date"]).is_dir()
            for out, model in _layout(path.parent, "results"))

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        runs: dict[Path, Run | None] = {}
        for path in files:
            match = DETAILS.match(path.name)
            if match is None:
                continue  # a results file: read for the details files it describes
            results = _results(path, match["date"])
            if results is None:
                ctx.bad(LoadError(str(path), None, f"no results_{match['date']}.json in "
                                  "OUT/results/<model>/ beside OUT/details/<model>/: it holds "
                                  "the model name and the sampling settings"))
                continue
            if results not in runs:
                runs[results] = _run(results, ctx)
            run = runs[results]
            if run is not None:
                yield from _Details(path, match["task"], run, ctx).records()


def _layout(folder: Path, kind: str) -> Iterator[tuple[Path, Path]]:
    """(OUT, model path) for each way `folder` can be OUT/<kind>/<model path>."""
    for ancestor in folder.parents:
        if ancestor.name == kind:
            yield ancestor.parent, folder.relative_to(ancestor)


def _results(details: Path, date: str) -> Path | None:
    for out, model in _layout(details.parent.parent, "details"):
        results = out / "results" / model / f"results_{date}.json"
        if results.is_file():
            return results
    return None


def _run(path: Path, ctx: LoadContext) -> Run | None:
    data = read_json(path, ctx)
    config = dig(data, "config_general", "model_config")
    name = dig(data, "config_general", "model_name") or dig(config, "model_name")
    if not isinstance(name, str) or not name:
        ctx.bad(LoadError(str(path), None, "missing: the model name",
                          field="config_general.model_name"))
        return None
    provider = dig(config, "provider")
    gen = dig(config, "generation_parameters")
    gen = gen if isinstance(gen, dict) else {}
    sampling = {sent: gen[saved] for saved, sent in SAMPLING if gen.get(saved) is not None}
    return Run(model=strip_litellm_provider(name),
               provider=provider if isinstance(provider, str) and provider
               else name.split("/")[0], sampling=sampling, o1="o1" in name)


class _Details:
    """The rows of one details file, each doc once."""

    def __init__(self, path: Path, task: str, run: Run, ctx: LoadContext) -> None:
        self.path, self.file, self.task, self.run, self.ctx = path, str(path), task, run, ctx
        self.seen: dict[str, tuple[int, bytes]] = {}

    def records(self) -> Iterator[Record]:
        return read_rows(_rows(self.path, self.ctx), self._record, self.ctx)

    def fail(self, number: int, name: str, reason: str) -> LoadError:
        return LoadError(self.file, number, reason, field=name)

    def _record(self, numbered: tuple[int, dict[str, Any]]) -> Record | None:
        """The record of one details row; None for a row that repeats a doc read already."""
        number, row = numbered
        doc, answer = row.get("doc") or {}, row.get("model_response") or {}
        doc_id = doc.get("id")
        if doc_id is None:
            raise self.fail(number, "doc.id", "missing")
        messages = self._messages(number, answer.get("input"))
        texts, reasonings = self._texts(number, answer)
        n = doc.get("num_samples") or 1
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise self.fail(number, "doc.num_samples", f"expected a positive integer, got {n!r}")
        digest = hashlib.blake2b(orjson.dumps([messages, texts, reasonings, n]),
                                 digest_size=16).digest()
        first = self.seen.setdefault(str(doc_id), (number, digest))
        if first[0] != number:
            if first[1] != digest:
                raise self.fail(number, "doc.id", f"doc {doc_id} is already at row {first[0]} "
                                "with another prompt or answer")
            self.ctx.skip(DUPLICATE, where_of(self.file, number))
            return None
        task = doc.get("task_name") if isinstance(doc.get("task_name"), str) else self.task
        request = _request(self.run, doc, messages, n)
        unusable = _unusable(texts, reasonings, n)
        response = None if unusable else text_response(
            CHAT_PATH, texts, id=synthetic_id(HARNESS, self.path.name, number),
            model=self.run.model, reasonings=reasonings)
        return make_record(CHAT_PATH, self.run.model, request, response,
                           {"harness": HARNESS, "instance": f"{task}:{doc_id}"}, self.file,
                           number, unusable=unusable)

    def _messages(self, number: int, value: Any) -> list[dict[str, Any]]:
        if isinstance(value, str):
            value = _parse_repr(value)
        if (not isinstance(value, list) or not value or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str)
                and isinstance(m.get("content"), str | list | None) for m in value)
                or not _is_json(value)):
            raise self.fail(number, "model_response.input", "expected the chat messages sent: "
                            "a list of {role, content} (or its JSON or Python repr)")
        # parquet gives every message every field of the column: null means not there
        return [{k: v for k, v in m.items() if v is not None} for m in value]

    def _texts(self, number: int, answer: dict[str, Any]
               ) -> tuple[list[str | None], list[str | None] | None]:
        texts, reasonings = answer.get("text"), answer.get("reasonings")
        if not isinstance(texts, list) or not all(isinstance(t, str | None) for t in texts):
            raise self.fail(number, "model_response.text", "expected a list of strings")
        if not reasonings:
            return texts, None
        if not isinstance(reasonings, list) or not all(isinstance(r, str | None)
                                                       for r in reasonings):
            raise self.fail(number, "model_response.reasonings", "expected a list of strings "
                            "or nulls (one per choice)")
        return texts, reasonings


def _rows(path: Path, ctx: LoadContext) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number from 1, row) of a details file, a batch at a time, only the columns read."""
    try:  # an optional extra: only this format needs it
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise LoadError(str(path), None, NO_PYARROW) from None
    file = str(path)
    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
        structs = {name: schema.field(name).type for name in COLUMNS
                   if schema.get_field_index(name) >= 0
                   and pa.types.is_struct(schema.field(name).type)}
        wanted = {(name, child): kind.get_field_index(child) for name, kind in structs.items()
                  for child in COLUMNS[name] if kind.get_field_index(child) >= 0}
        missing = [c for c in REQUIRED if tuple(c.split(".")) not in wanted]
        if missing:
            ctx.bad(LoadError(file, None, "missing: not a lighteval details file",
                              field=missing[0]))
            return
        total, size, done, number = parquet.metadata.num_rows or 1, path.stat().st_size, 0, 0
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=list(structs)):
            parts = {name: batch.column(name).flatten() for name in structs}  # nulls kept
            values = {key: parts[key[0]][at].to_pylist() for key, at in wanted.items()}
            for i in range(batch.num_rows):
                row: dict[str, dict[str, Any]] = {name: {} for name in structs}
                for (name, child), column in values.items():
                    row[name][child] = column[i]
                number += 1
                yield number, row
            sent = size * number // total
            ctx.progress(sent - done)
            done = sent
    except (OSError, pa.ArrowException) as e:
        ctx.bad(LoadError(file, None, f"not a readable parquet file: {e}"))


def _parse_repr(text: str) -> Any:
    """Messages saved as text: JSON, or the Python repr of a list (lighteval 0.13 can write
    either). `ast.literal_eval` reads literals only; nothing is ever evaluated."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _is_json(value: Any) -> bool:
    """Whether a parsed Python literal is plain JSON (no sets, bytes or non-string keys)."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


def _request(run: Run, doc: dict[str, Any], messages: list[dict[str, Any]],
             n: int) -> dict[str, Any]:
    """The body lighteval's litellm client sends for one doc (`__call_api`)."""
    size = doc.get("generation_size")
    max_new = size if isinstance(size, int) and size > 0 else None
    stop = doc.get("stop_sequences")
    if run.provider == "anthropic" and isinstance(stop, list):
        stop = [s for s in stop if isinstance(s, str) and s.strip()]
    body: dict[str, Any] = {
        "model": run.model, "messages": messages, "response_format": {"type": "text"},
        "max_tokens": max_new, "stop": stop, "n": n,
        "logprobs": bool(doc.get("use_logits")) if run.provider == "openai" else None}
    if not run.o1:
        body.update(run.sampling)
    if body.get("max_completion_tokens") is None:
        body["max_completion_tokens"] = max_new
    return {k: v for k, v in body.items() if v is not None}  # litellm sends no nulls


def _unusable(texts: list[str | None], reasonings: list[str | None] | None,
              n: int) -> str | None:
    """Why a row's texts are not the answer to its request, or None."""
    if texts == [""] and n > 1:
        return (f"lighteval saved one empty text for num_samples {n}: it keeps only [\"\"] "
                "when the first sample is empty or the call failed, and drops the others")
    if texts == [""] and not (reasonings and reasonings[0] is not None):
        return ("lighteval saved an empty answer, which is also what it saves for a call "
                "that failed after all its retries: the server's answer is not known")
    if len(texts) != n:
        return f"lighteval saved {len(texts)} texts for num_samples {n}"
    if None in texts:
        return f"lighteval saved a null text (sample {texts.index(None)})"
    if reasonings is not None and len(reasonings) != n:
        return f"lighteval saved {len(reasonings)} reasonings for {n} texts"
    return None
