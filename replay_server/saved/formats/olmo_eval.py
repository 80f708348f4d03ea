"""Reader for olmo-eval run directories: predictions joined to requests on `doc_id`.

    <out>/metrics.json                                   config.provider.model
    <out>/predictions/<model>/<task>_<hash6>-predictions.jsonl
        {"doc_id", "native_id", "model_output": [{"text", ["original_text"], ["finish_reason"],
         ["completion_tokens"], ["num_tokens"], ...}, ...], "instance_metrics", "label", ...}
    <out>/requests/<model>/<task>_<hash6>-requests.jsonl
        {"request_type", "doc", "request": {"context", "provider_request", "generation_kwargs",
         "stop_sequences", ["tools"]}, "idx": 0, "task_name", "doc_id", "native_id", "label"}

What is served, and why:
- The prompt is `request.context`: the message list of a chat request (system prompt
  included), the prompt string of a completion request. The request body is what
  olmo-eval's `vllm_server` provider sends for it, built from the saved generation
  kwargs: `n = num_samples`, so a doc with k samples is one exchange with k choices.
- The text is `original_text` (the raw content, reasoning included) when saved, else
  `text`; `finish_reason` when saved, else null. A null text is not an answer, and neither
  is an empty one when tools were offered (olmo-eval saves no tool calls).
- `usage.completion_tokens` is the saved `completion_tokens`, the whole response's count
  (with n > 1 every sample carries the total); olmo-eval never saves `prompt_tokens`, so
  `prompt_tokens` and `total_tokens` are null, and usage is null when no count was saved.
  Each sample's own `num_tokens` goes to `sample_usage` (served when one sample is asked
  for alone).
- The model is `config.provider.model` from `<out>/metrics.json` when its sanitized form
  (`:`, `/`, `\\` and space become `_`) is the `<model>` folder; else the folder name, which
  is all the files hold (map it with --model-alias).
- Left out, counted: loglikelihood rows (`generate_until_and_loglikelihood` rows are
  generations and are kept); completion prompts sent as token ids (not saved);
  multi-turn rows with a `trajectory` (their output answers the last turn, not the saved
  prompt); rows of a predictions file with no requests file beside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...paths import CHAT_PATH, COMPLETION_PATH
from ..record import Record, make_record
from .base import LoadContext, dig, read_json, read_rows, synthetic_id, text_response, usage
from .paired import Predictions, Requests, Row, check_native_id, skip_all

HARNESS = "olmo-eval"
PREDICTIONS, REQUESTS = "-predictions.jsonl", "-requests.jsonl"
GENERATIONS = ("generate_until", "generate_until_and_loglikelihood")
NO_REQUESTS = ("predictions with no requests file beside them (saved with --no-save-requests?): "
               "their prompts were never saved")
NO_PREDICTIONS = "requests with no predictions file beside them: no output was saved"


def sanitize(name: str) -> str:
    """olmo-eval's `sanitize_spec_for_filename`: how a model becomes a folder name."""
    for char in ":/\\ ":
        name = name.replace(char, "_")
    return name


def _kind(path: Path) -> str | None:
    if path.name.startswith("task-") and path.name[5:8].isdigit():
        return None  # oe-eval's naming
    for kind, suffix in (("predictions", PREDICTIONS), ("requests", REQUESTS)):
        if path.name.endswith(suffix) and path.parent.parent.name == kind:
            return kind
    return None


def _pair(path: Path, kind: str) -> tuple[Path, Path]:
    """(predictions, requests) paths of the task file `path`."""
    out, model = path.parent.parent.parent, path.parent.name
    stem = path.name[: -len(PREDICTIONS if kind == "predictions" else REQUESTS)]
    return (out / "predictions" / model / (stem + PREDICTIONS),
            out / "requests" / model / (stem + REQUESTS))


class OlmoEvalReader:
    """olmo-eval run directories: predictions joined to requests on doc_id."""

    name = "olmo-eval"
    expects = ('olmo-eval output: predictions/MODEL/*-predictions.jsonl, lines starting '
               '{"doc_id", and requests/MODEL/*-requests.jsonl, lines starting '
               '{"request_type"')

    def detect(self, path: Path, head: bytes) -> bool:
        if path.name == "metrics.json":
            return (path.parent / "predictions").is_dir()
        kind = _kind(path)
        start = head.lstrip()
        if kind == "predictions":
            return start.startswith(b'{"doc_id"')
        return kind == "requests" and start.startswith(b'{"request_type"')

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        pairs = sorted({_pair(p, k) for p in files if (k := _kind(p)) is not None})
        models: dict[tuple[Path, str], str] = {}
        for predictions, requests in pairs:
            if not predictions.exists():
                skip_all(requests, ctx, NO_PREDICTIONS)
            elif not requests.exists():
                skip_all(predictions, ctx, NO_REQUESTS)
            else:
                out, folder = predictions.parent.parent.parent, predictions.parent.name
                if (out, folder) not in models:
                    models[out, folder] = _model_name(out, folder, ctx)
                yield from _Task(predictions, requests, models[out, folder], ctx).records()


def _model_name(out: Path, folder: str, ctx: LoadContext) -> str:
    model = dig(read_json(out / "metrics.json", ctx), "config", "provider", "model")
    return model if isinstance(model, str) and sanitize(model) == folder else folder


class _Task:
    """One task's predictions file joined to its requests file."""

    def __init__(self, predictions: Path, requests: Path, model: str, ctx: LoadContext):
        self.predictions = predictions
        self.requests = Requests(requests, ctx)
        self.model = model
        self.ctx = ctx

    def records(self) -> Iterator[Record]:
        yield from read_rows(Predictions(self.predictions, self.ctx), self._join, self.ctx)
        for row in self.requests.leftovers():
            self.ctx.skip("request with no predictions row", row.where)

    def _join(self, numbered: tuple[int, Row]) -> Record | None:
        """The record of a predictions row joined to its request row, or None if skipped."""
        doc_id, row = numbered
        given = self.requests.take((doc_id, 0))
        if given is None:
            raise row.fail("doc_id", f"doc_id {doc_id} has no row in {self.requests.file}: "
                                     "the predictions and requests files do not describe "
                                     "the same run")
        check_native_id(row, given)
        kind = given.obj.get("request_type")
        if kind not in GENERATIONS:
            self.ctx.skip(f"{kind} request (not a generation)", given.where)
            return None
        if row.obj.get("trajectory") is not None:
            self.ctx.skip("multi-turn trajectory (the saved output answers the last turn, "
                          "not the saved prompt)", row.where)
            return None
        outputs = row.obj.get("model_output")
        n = len(outputs) if isinstance(outputs, list) and outputs else 1
        built = _request(self.model, given, n)
        if isinstance(built, str):
            self.ctx.skip(built, given.where)
            return None
        endpoint, request = built
        response, unusable, sample_usage = _response(endpoint, request, row, self.model)
        task = given.obj.get("task_name") or self.predictions.name[: -len(PREDICTIONS)]
        source = {"file": row.file, "line": row.line, "harness": HARNESS,
                  "instance": f"{task}:{doc_id}", "request": given.where}
        return make_record(endpoint, self.model, request, response, source, row.file, row.line,
                           unusable=unusable, sample_usage=sample_usage)


def _request(model: str, given: Row, n: int) -> tuple[str, dict[str, Any]] | str:
    """(endpoint, body) that the vllm_server provider sends for a saved request row, or why
    none can be keyed."""
    request = given.mapping("request")
    context = request.get("context")
    trace = request.get("provider_request") or {}
    kwargs = request.get("generation_kwargs") or dig(trace, "generation_kwargs") or {}
    stop = request.get("stop_sequences") or dig(trace, "stop_sequences") or []
    if not isinstance(kwargs, dict) or not isinstance(stop, list):
        raise given.fail("request.generation_kwargs", "expected an object (and "
                         "`stop_sequences` a list)")
    sampling = _sampling(kwargs, stop, n)
    if isinstance(context, list) or (isinstance(context, str)
                                     and dig(trace, "endpoint") == "/chat/completions"):
        messages = context if isinstance(context, list) else [{"role": "user", "content": context}]
        body = {"model": model, "messages": messages, **sampling}
        if request.get("tools"):
            body["tools"] = request["tools"]
        body.update(logprobs=True, top_logprobs=1)
        if kwargs.get("chat_template_kwargs"):
            body["chat_template_kwargs"] = kwargs["chat_template_kwargs"]
        return CHAT_PATH, body
    if not isinstance(context, str):
        raise given.fail("request.context", "expected a message list or a prompt string")
    if dig(trace, "input_mode") == "prompt_token_ids":
        return "completion prompt sent as token ids, which olmo-eval does not save"
    return COMPLETION_PATH, {"model": model, "prompt": context, "logprobs": 1, **sampling,
                             "add_special_tokens": False}


def _sampling(kwargs: dict[str, Any], stop: list[Any], n: int) -> dict[str, Any]:
    """The sampling fields both endpoints send, from the saved generation kwargs."""
    out: dict[str, Any] = {"n": kwargs.get("num_samples", n)}
    for saved, sent in (("max_gen_toks", "max_tokens"), ("temperature", "temperature"),
                        ("top_p", "top_p")):
        if kwargs.get(saved) is not None:
            out[sent] = kwargs[saved]
    if stop:
        out["stop"] = stop
    if kwargs.get("do_sample") and kwargs.get("top_k") is not None:
        out["top_k"] = kwargs["top_k"]  # extra_body: sent only when sampling
    return out


def _text(output: Any) -> str | None:
    if not isinstance(output, dict):
        return None
    for field in ("original_text", "text"):
        if isinstance(output.get(field), str):
            return str(output[field])
    return None


def _response(endpoint: str, request: dict[str, Any], row: Row, model: str
              ) -> tuple[dict[str, Any] | None, str | None, list[Any] | None]:
    """(response body, why it is unusable, per-sample usage) of one predictions row."""
    outputs = row.obj.get("model_output")
    if not isinstance(outputs, list) or not outputs:
        return None, "olmo-eval saved no model_output for this doc", None
    found = [_text(o) for o in outputs]
    texts = [t for t in found if t is not None]
    if len(texts) < len(found):
        return None, f"olmo-eval saved a null text (sample {found.index(None)})", None
    if request.get("tools") and "" in texts:
        return None, ("olmo-eval saved an empty text with tools offered; it does not save "
                      "tool calls, so the answer may have been one"), None
    finish = [o.get("finish_reason") for o in outputs]
    totals = [o.get("completion_tokens") for o in outputs]  # each sample saves the total
    body = text_response(
        endpoint, texts, [f if isinstance(f, str) else None for f in finish],
        usage(None, totals[0]) if totals.count(totals[0]) == len(totals) else None,
        id=synthetic_id(HARNESS, row.file, row.line), model=model)
    samples = [usage(None, o.get("num_tokens")) for o in outputs]
    return body, None, samples if len(samples) > 1 and any(samples) else None
