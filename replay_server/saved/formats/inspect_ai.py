"""Reader for inspect_ai eval logs: `.eval` (a zip of JSON members) and `.json`.

Every model call event of every sample is one record, keyed on the request that was sent:
`call.request` with the messages (or a Responses API call's `input` items) put back from
the sample's call pool (`events_data.calls` via `call_refs`, the condensed form),
`attachment://` references resolved, `extra_body` merged and `extra_headers` dropped (the
openai SDK sends it that way), and fields that were not given (saved as null) left out.
The answer is `call.response` (the openai SDK's `model_dump()` of the response: the raw
body plus a few SDK-only null fields, dropped here for chat; for a streamed call, the SDK's
aggregate), else, for chat, one rebuilt from the event's `output` (`inspect_openai.py`).

Calls of the `openai/` provider through the Responses API (its default for some models,
`-M responses_api=true` for any) are `/v1/responses` records: the request's `input`, the
SDK's dump of the `Response` (every field the SDK knows, null where the server sent none;
`created_at` an integer again, as servers send it).

Calls of the `anthropic/` provider (Anthropic's Messages API) are `/v1/messages` records:
the request inspect sent (`client.messages.create` or `.stream`: its `extra_headers` dropped
but `anthropic-beta`, which is keyed as the field of that name), the SDK's dump of the
`Message` (null where the API sent none, as the Responses dumps; a streamed call's is the
SDK's final message, which a replay streams again in small deltas).

Calls of the `google/` provider (Google's Gemini API, through the google-genai SDK) are
Gemini records (`paths.GEMINI_PATH`, the model of the request's path): inspect logs the
SDK call's arguments, not the body, and `inspect_google.py` rebuilds the body the SDK sent
and the response the API sent from them.

Not served (each counted): calls whose `call` was not logged (inspect keeps the first 5
per model per sample unless `--log-model-api`; its wire conversion of `input` is
provider-specific, so it is not rebuilt), cache reads, pending calls, calls of failed
sample attempts, requests whose media inspect did not log, `google/` calls of inspect
before 0.3.69 (another SDK), and calls in another API's shape. A failed call is saved as
unusable.

The instance is the sample id: its epochs are the k samples of one instance, in epoch order.
`.eval` members are read one sample at a time (`eval_zip`). A `.json` log is read whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ...errors import LoadError, where_of
from ...paths import CHAT_PATH, MESSAGES_PATH, RESPONSES_PATH
from ...wire.families import family_of
from ..jsonl import not_json
from ..record import Record, make_record
from . import inspect_google
from .base import LoadContext, read_rows
from .eval_zip import eval_samples
from .inspect_google import OLD_SDK, is_gemini, old_sdk
from .inspect_openai import from_output, raw_chat, raw_responses

HARNESS = "inspect_ai"
MEDIA_REMOVED = "<base64-data-removed>"
# Arguments of the openai SDK's create() that never reach the JSON body as such.
SDK_ONLY = ("extra_headers", "extra_query", "extra_body", "timeout")
NOT_LOGGED = ("model call not saved: call.request missing (inspect logs the first 5 calls "
              "per model per sample unless run with --log-model-api)")


class InspectAIReader:
    """inspect_ai logs (`.eval` zips and `.json`): one record per model call."""

    name = "inspect_ai"
    expects = 'inspect_ai logs: .eval, or .json with "eval_id" and "run_id"'

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix == ".eval":
            return head.startswith(b"PK\x03\x04")
        if path.suffix != ".json":
            return False
        if head.strip() == b"{":  # a pretty-printed log: look a little further
            with path.open("rb") as f:
                head = f.read(4096)
        return head.lstrip().startswith(b"{") and b'"eval_id"' in head and b'"run_id"' in head

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        for path in files:
            file = str(path)
            samples = eval_samples(path, ctx) if path.suffix == ".eval" else _json_samples(
                path, ctx)
            for sample in samples:
                yield from _sample_records(sample, file, ctx)


def _json_samples(path: Path, ctx: LoadContext) -> Iterator[dict[str, Any]]:
    file = str(path)
    data = path.read_bytes()
    ctx.progress(len(data))
    try:
        log = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        ctx.bad(LoadError(file, e.lineno, not_json(e)))
        return
    samples = log.get("samples") if isinstance(log, dict) else None
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        if samples is not None:
            ctx.bad(LoadError(file, None, "expected a list of sample objects", field="samples"))
        return
    yield from sorted(samples, key=lambda s: s.get("epoch") or 0)


def _model_events(events: Any) -> Iterator[dict[str, Any]]:
    """Model events in order, including those nested in older logs' subtask/tool events."""
    for event in events if isinstance(events, list) else []:
        if isinstance(event, dict):
            if event.get("event") == "model":
                yield event
            yield from _model_events(event.get("events"))


def _sample_records(sample: dict[str, Any], file: str, ctx: LoadContext) -> Iterator[Record]:
    sample_id, epoch = sample.get("id"), sample.get("epoch")
    events_data = sample.get("events_data")
    pool = events_data.get("calls") if isinstance(events_data, dict) else None
    pool = pool if isinstance(pool, list) else []
    attachments = sample.get("attachments")
    attachments = attachments if isinstance(attachments, dict) else {}
    for retry in sample.get("error_retries") or []:
        for _ in _model_events(retry.get("events") if isinstance(retry, dict) else None):
            ctx.skip("model call of a failed sample attempt (error_retries)",
                     where_of(file, None, f"sample {sample_id!r}, epoch {epoch}"))

    def place(numbered: tuple[int, dict[str, Any]]) -> str:
        return f"sample {sample_id!r}, epoch {epoch}, model call {numbered[0]}"

    def call(numbered: tuple[int, dict[str, Any]]) -> Record | None:
        event = numbered[1]
        source = {"harness": HARNESS, "instance": str(sample_id), "epoch": epoch,
                  "event": event.get("uuid")}
        return _record(event, pool, attachments, source, file,
                       where_of(file, None, place(numbered)), ctx)

    yield from read_rows(enumerate(_model_events(sample.get("events"))), call, ctx, place)


def _record(event: dict[str, Any], pool: list[Any], attachments: dict[str, str],
            source: dict[str, Any], file: str, where: str, ctx: LoadContext) -> Record | None:
    call = event.get("call")
    if event.get("pending"):
        ctx.skip("model call still pending (the log was written mid-run)", where)
        return None
    if not isinstance(call, dict) or not isinstance(call.get("request"), dict):
        cached = event.get("cache") == "read"
        ctx.skip("answered from inspect's cache (no request was sent)" if cached
                 else NOT_LOGGED, where)
        return None
    logged, reason = _logged(call, pool, attachments, file)
    saved = _resolve(call.get("response"), attachments)
    unusable = _failure(event, call, saved)
    if reason is None and is_gemini(logged):
        if old_sdk(saved):
            ctx.skip(OLD_SDK, where)
            return None
        return inspect_google.record(event, logged, saved, unusable, source, file)
    request, reason = _wire_request(logged) if reason is None else (logged, reason)
    if reason is not None:
        ctx.skip(reason, where)
        return None
    return _openai_or_anthropic(event, call, request, saved, unusable, source, file,
                                where, ctx, attachments)


def _openai_or_anthropic(event: dict[str, Any], call: dict[str, Any],
                         request: dict[str, Any], saved: Any, unusable: str | None,
                         source: dict[str, Any], file: str, where: str, ctx: LoadContext,
                         attachments: dict[str, str]) -> Record | None:
    """The record of a call to OpenAI's chat completions or Responses API, or to
    Anthropic's Messages API (each told by its request and response)."""
    if _anthropic(call["request"], saved):
        return _message_record(event, call, request, saved, unusable, source, file)
    responses_api = "messages" not in request and "input" in request
    answer = "output" if responses_api else "choices"
    if unusable is None and isinstance(saved, dict) and not isinstance(saved.get(answer), list):
        ctx.skip("not an OpenAI Responses API call (the response has no output)"
                 if responses_api else
                 "not an OpenAI chat-completions call (the response has no choices)", where)
        return None
    response = None
    if responses_api:
        if unusable is None and not isinstance(saved, dict):
            unusable = "the Responses API call saved no response"
        response = raw_responses(saved) if unusable is None else None
        return make_record(RESPONSES_PATH, request.get("model") or event.get("model"),
                           request, response, source, file, None, unusable=unusable)
    if unusable is None:
        streamed = call["request"].get("stream") is True
        response = raw_chat(saved, streamed) if isinstance(saved, dict) else from_output(
            _resolve(event.get("output"), attachments), f"{where}:{event.get('uuid')}")
        if response is None:
            unusable = "the model call saved neither a response nor an output"
    model = request.get("model") or event.get("model")
    return make_record(CHAT_PATH, model, request, response, source, file, None,
                       unusable=unusable)


def _anthropic(request: dict[str, Any], saved: Any) -> bool:
    """Whether a call is Anthropic's Messages API: its answer is a message (or Anthropic's
    error envelope), or its request has what only a Messages request has."""
    if isinstance(saved, dict) and saved.get("type") in ("message", "error"):
        return "choices" not in saved
    return "messages" in request and ("system" in request or "thinking" in request
                                      or "stop_sequences" in request)


def _message_record(event: dict[str, Any], call: dict[str, Any], request: dict[str, Any],
                    saved: Any, unusable: str | None, source: dict[str, Any],
                    file: str) -> Record:
    """The /v1/messages record of an `anthropic/` call: the request with its keyed headers
    put back (`anthropic-beta`), the SDK's dump of the message."""
    headers = call["request"].get("extra_headers")
    if isinstance(headers, dict):
        request = family_of(MESSAGES_PATH).with_headers(request, [
            (str(k).encode("latin-1"), str(v).encode("latin-1")) for k, v in headers.items()])
    if unusable is None and not (isinstance(saved, dict) and saved.get("type") == "message"):
        unusable = "the Messages API call saved no message"
    return make_record(MESSAGES_PATH, request.get("model") or event.get("model"), request,
                       saved if unusable is None else None, source, file, None,
                       unusable=unusable)


def _logged(call: dict[str, Any], pool: list[Any], attachments: dict[str, str],
            file: str) -> tuple[dict[str, Any], str | None]:
    """`call.request` with its conversation put back from the call pool and its
    attachments resolved; and why it cannot be sent again, or None."""
    request = dict(call["request"])
    refs = call.get("call_refs")
    if refs is not None:
        request[call.get("call_key") or "messages"] = _expand(refs, pool, file)
    request = _resolve(request, attachments)
    if _mentions(request, MEDIA_REMOVED):
        return request, "request had image or audio data that inspect does not log"
    return request, None


def _wire_request(request: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The JSON body the openai SDK sent for a logged request, or why there is none."""
    if not isinstance(request.get("messages"), list) and not isinstance(
            request.get("input"), str | list):
        return request, "not an OpenAI chat-completions or Responses API call (the request " \
                        "has no messages and no input)"
    extra = request.get("extra_body")
    body = {k: v for k, v in request.items() if k not in SDK_ONLY and v is not None}
    if isinstance(extra, dict):
        body.update(extra)
    return body, None


def _expand(refs: Any, pool: list[Any], file: str) -> list[Any]:
    """Messages from range refs `[[start, end_exclusive], ...]` into the call pool."""
    messages: list[Any] = []
    for ref in refs if isinstance(refs, list) else [None]:
        start, end = ref if isinstance(ref, list) and len(ref) == 2 else (None, None)
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= len(pool)):
            raise LoadError(file, None, f"{ref!r} is not a range of the {len(pool)} saved "
                            "call messages (events_data.calls)", field="call.call_refs")
        messages.extend(pool[start:end])
    return messages


def _resolve(value: Any, attachments: dict[str, str]) -> Any:
    """`value` with every `attachment://<hash>` string replaced by the attachment."""
    if not attachments:
        return value
    if isinstance(value, str):
        for prefix in ("attachment://", "tc://"):
            if value.startswith(prefix):
                return attachments.get(value[len(prefix):], value)
        return value
    if isinstance(value, dict):
        return {k: _resolve(v, attachments) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, attachments) for v in value]
    return value


def _mentions(value: Any, text: str) -> bool:
    if isinstance(value, str):
        return value == text
    if isinstance(value, dict):
        return any(_mentions(v, text) for v in value.values())
    if isinstance(value, list):
        return any(_mentions(v, text) for v in value)
    return False


def _failure(event: dict[str, Any], call: dict[str, Any], saved: Any) -> str | None:
    if not event.get("error") and not call.get("error"):
        return None
    detail = event.get("error")
    if not detail and isinstance(saved, dict):
        error = saved.get("error")
        detail = error.get("message") if isinstance(error, dict) else error
    first = (str(detail or "").strip() or "an error response").splitlines()[0][:300]
    return f"the saved model call failed: {first}"
