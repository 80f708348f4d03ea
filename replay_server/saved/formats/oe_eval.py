"""Reader for oe-eval (OLMES) output folders: predictions joined to requests on (doc_id, idx).

    task-NNN-<task>-metrics.json         model_config.model (and model_type)
    task-NNN-<task>-requests.jsonl       {"request_type", "doc", "request": {"context",
                                          "stop_sequences", "generation_kwargs"}, "idx",
                                          "task_name", "doc_id", "native_id", "label"}
    task-NNN-<task>-predictions.jsonl    {"doc_id", "native_id", "metrics",
                                          "model_output": [<one per idx>], ...}

The task name is not sanitized (`task-002-arc_easy:mc-…`). oe-eval talks HTTP only through
its litellm model, so every record is the chat request litellm sends when rescoring
(`models/litellm.py`): a string context becomes one user message; a chat context is
`{"messages", "assistant_prefix"}`, whose prefix litellm appends to the saved message list
in place and then drops as the last (assistant) message. Rows of a doc that share one
request object (repeats without `generation_seeds`) therefore send the earlier repeats'
prefixes as trailing assistant messages, and are keyed that way. `max_gen_toks` is sent as
`max_tokens`, `do_sample: false` as `temperature: 0.0`, the other generation kwargs as they
are; stop sequences (applied client-side) and `n` are never sent. Repeat `idx` is answered
by `model_output[idx]`, one exchange per repeat, in idx order.

What is served:
- litellm rows: `llm_response`, verbatim (the raw text, finish_reason and usage as the
  server sent them). A row with `llm_error` is a failed call, not an answer.
- other rows (vLLM, HF): `continuation_raw` if saved, else `continuation`; finish_reason
  null; usage from `context_tokens` (the prompt's token count) and `num_tokens`.
- The model is `model_config.model` from the task's metrics file (else the run's
  metrics.json); for litellm runs without its litellm provider prefix (`openai/`, ...),
  which litellm strips before sending.
Left out, counted: loglikelihood rows, and rows whose prompt was cut by
`truncation_size_when_saved` (marked only by `<<truncated K chars>>` / `<<truncated K
elements>>`): the full prompt a client sends was never saved.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

from ...errors import LoadError
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
    usage,
)
from .paired import Predictions, Requests, Row, check_native_id, skip_all

HARNESS = "oe-eval"
TASK_FILE = re.compile(r"(task-\d{3,}-.+)-(predictions\.jsonl|requests\.jsonl|metrics\.json)")
GENERATIONS = ("generate_until", "generate_until_and_loglikelihood")
NO_REQUESTS = ("predictions with no -requests.jsonl beside them (the run did not save raw "
               "requests: oe-eval's run_eval defaults --save-raw-requests to false): their "
               "prompts were never saved")
NO_PREDICTIONS = "requests with no -predictions.jsonl beside them: no output was saved"
TRUNCATED = "prompt truncated when saved (truncation_size_when_saved)"
CHARS_MARK = re.compile(r"<<truncated \d+ chars>>(?=.{50}\Z)", re.DOTALL)
ELEMENTS_MARK = re.compile(r"<<truncated \d+ elements>>")


class OeEvalReader:
    """oe-eval (OLMES) task files: predictions joined to requests on (doc_id, idx)."""

    name = "oe-eval"
    expects = ('oe-eval output: task-NNN-TASK-predictions.jsonl, lines starting {"doc_id", '
               'and task-NNN-TASK-requests.jsonl, lines starting {"request_type"')

    def detect(self, path: Path, head: bytes) -> bool:
        match = TASK_FILE.fullmatch(path.name)
        if match is None:
            return False
        stem, kind = match.groups()
        if kind == "metrics.json":
            return (path.parent / f"{stem}-predictions.jsonl").exists()
        start = head.lstrip()
        return start.startswith(b'{"doc_id"' if kind.startswith("predictions")
                                else b'{"request_type"')

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        stems = sorted({p.parent / m.group(1) for p in files
                        if (m := TASK_FILE.fullmatch(p.name)) is not None})
        for stem in stems:
            predictions = stem.with_name(f"{stem.name}-predictions.jsonl")
            requests = stem.with_name(f"{stem.name}-requests.jsonl")
            if not predictions.exists():
                skip_all(requests, ctx, NO_PREDICTIONS)
            elif not requests.exists():
                skip_all(predictions, ctx, NO_REQUESTS)
            else:
                task = _Task(predictions, requests, ctx)
                if task.model is not None:
                    yield from task.records()


def model_name(metrics: dict[str, Any] | None) -> str | None:
    """The name a client sends: `model_config.model`, less litellm's provider prefix."""
    config = dig(metrics, "model_config")
    model = dig(config, "model")
    if not isinstance(model, str) or not model:
        return None
    return strip_litellm_provider(model) if dig(config, "model_type") == "litellm" else model


def truncated(value: Any) -> bool:
    """Whether oe-eval's `truncate_long_strings` cut this saved value (it sets no flag)."""
    if isinstance(value, str):
        return CHARS_MARK.search(value) is not None
    if isinstance(value, dict):
        return any(truncated(v) for v in value.values())
    if isinstance(value, list):
        marked = (len(value) >= 2 and isinstance(value[-2], str)
                  and ELEMENTS_MARK.fullmatch(value[-2]) is not None)
        return marked or any(truncated(v) for v in value)
    return False


def litellm_kwargs(generation_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The body fields litellm sends for oe-eval's generation kwargs (`prepare_request`)."""
    kwargs = dict(generation_kwargs)
    if "max_gen_toks" in kwargs:
        kwargs["max_tokens"] = kwargs.pop("max_gen_toks")
    kwargs.pop("truncate_context", None)
    if not kwargs.pop("do_sample", True):
        kwargs["temperature"] = 0.0
    return kwargs


class _Task:
    """One task's predictions file joined to its requests file."""

    def __init__(self, predictions: Path, requests: Path, ctx: LoadContext):
        self.predictions = predictions
        self.requests = Requests(requests, ctx)
        self.ctx = ctx
        stem = predictions.name[: -len("-predictions.jsonl")]
        metrics = read_json(predictions.with_name(f"{stem}-metrics.json"), ctx)
        self.seeded = dig(metrics, "task_config", "generation_kwargs", "generation_seeds")
        self.model = model_name(metrics) or model_name(
            read_json(predictions.with_name("metrics.json"), ctx))
        if self.model is None:
            ctx.bad(LoadError(str(predictions), None, f"no model name: {stem}-metrics.json "
                              "(and the run's metrics.json) is missing or has no "
                              "model_config.model", field="model_config.model"))

    def records(self) -> Iterator[Record]:
        yield from chain.from_iterable(read_rows(Predictions(self.predictions, self.ctx),
                                                 self._doc, self.ctx))
        for left in self.requests.leftovers():
            self.ctx.skip("request with no saved output", left.where)

    def _doc(self, numbered: tuple[int, Row]) -> list[Record]:
        """One record per repeat of a doc (`model_output[idx]`), joined to its request row."""
        doc_id, row = numbered
        outputs = row.obj.get("model_output")
        if not isinstance(outputs, list):
            raise row.fail("model_output", "expected a list")
        shared: tuple[dict[str, Any], list[Any]] | None = None
        records = []
        for idx, output in enumerate(outputs):
            given = self.requests.take((doc_id, idx))
            if given is None:
                raise row.fail("model_output", f"doc_id {doc_id} idx {idx} has no row in "
                               f"{self.requests.file}: the predictions and requests files "
                               "do not describe the same run")
            check_native_id(row, given)
            request = given.mapping("request")
            if given.obj.get("request_type") not in GENERATIONS:
                self.ctx.skip(f"{given.obj.get('request_type')} request (not a generation)",
                              given.where)
            elif truncated(request.get("context")):
                self.ctx.skip(TRUNCATED, given.where)
            else:
                shared, messages = self._messages(given, request, shared)
                records.append(self._record(doc_id, idx, row, given, messages, output))
        return records

    def _messages(self, given: Row, request: dict[str, Any],
                  shared: tuple[dict[str, Any], list[Any]] | None
                  ) -> tuple[tuple[dict[str, Any], list[Any]] | None, list[Any]]:
        """The messages litellm sends, and the message list later repeats of the same
        request object will see (litellm appends the assistant prefix to it in place)."""
        context = request.get("context")
        if isinstance(context, str):
            return shared, [{"role": "user", "content": context}]
        saved = context.get("messages") if isinstance(context, dict) else None
        if not isinstance(saved, list) or not all(isinstance(m, dict) for m in saved):
            raise given.fail("request.context", "expected a prompt string or "
                             '{"messages": [...], "assistant_prefix": ...}')
        if shared is not None and not self.seeded and shared[0] == request:
            messages = shared[1]
        else:
            messages = list(saved)
            shared = (request, messages)
        prefix = dig(context, "assistant_prefix")
        if prefix:
            messages.append({"role": "assistant", "content": prefix})
        if messages and messages[-1].get("role") == "assistant":
            return shared, messages[:-1]
        return shared, list(messages)

    def _record(self, doc_id: int, idx: int, row: Row, given: Row, messages: list[Any],
                output: Any) -> Record:
        assert self.model is not None
        kwargs = given.mapping("request").get("generation_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise given.fail("request.generation_kwargs", "expected an object")
        body = {"model": self.model, "messages": messages, **litellm_kwargs(kwargs)}
        response, unusable = self._response(row, idx, output)
        task = given.obj.get("task_name") or self.predictions.name
        source = {"file": row.file, "line": row.line, "harness": HARNESS,
                  "instance": f"{task}:{doc_id}", "idx": idx, "request": given.where}
        return make_record(CHAT_PATH, self.model, body, response, source, row.file, row.line,
                           unusable=unusable)

    def _response(self, row: Row, idx: int, output: Any
                  ) -> tuple[dict[str, Any] | None, str | None]:
        if not isinstance(output, dict):
            raise row.fail(f"model_output[{idx}]", "expected an object")
        if output.get("llm_error") is not None:
            return None, f"the litellm call failed: {output['llm_error']}"
        if "llm_response" in output:
            if not isinstance(output["llm_response"], dict):
                raise row.fail(f"model_output[{idx}].llm_response", "expected an object")
            return output["llm_response"], None
        text = output.get("continuation_raw")
        text = text if isinstance(text, str) else output.get("continuation")
        if not isinstance(text, str):
            return None, "oe-eval saved no continuation (null or missing)"
        return text_response(CHAT_PATH, [text],
                             usage=usage(output.get("context_tokens"), output.get("num_tokens")),
                             id=synthetic_id(HARNESS, row.file, row.line, idx),
                             model=self.model), None
