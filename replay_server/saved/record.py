"""The native record: one saved exchange, one JSONL line.

    {"replay_record": 1,
     "endpoint": "/v1/chat/completions",            # or "/v1/completions"
     "model": "Qwen/Qwen3-8B",                     # the name clients ask for
     "request": {...},                              # as sent, minus transport-only fields
     "response": {...},                             # the whole non-streamed body, or null
     "unusable": "why",                             # only when response is null
     "sample_usage": [{...} | null, ...],           # optional: each choice's own usage
     "also_requests": [{...}, ...],                 # optional: other forms of the same
                                                    # request (token ids for a text prompt)
     "stream": ["data: {...}\n\n", ...],            # optional: the SSE frames as sent
     "batch": {"id", "index", "size", "usage"},     # optional: the batch a prompt was in
     "source": {"file": ..., "line": ..., "harness": ..., "instance": ...}}

The endpoint is `/v1/chat/completions`, `/v1/completions` or `/v1/responses` (whose
`response` is the final response object). A completion record holds one prompt: a batch is
saved as one record per prompt, each with `batch` (the batch's `usage`, which cannot be
split, and the prompt's place in it). `stream` is optional (records without it are read as
before): the frames of a recorded stream, exactly as the upstream sent them, which must
aggregate to `response`. Every reader yields these; the recorder and `convert` write
them; the index reads nothing else. This module validates and serialises records; it never
decides what to serve.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import LoadError, where_of
from ..paths import CHAT_PATH, COMPLETION_PATH, ENDPOINTS, RESPONSES_PATH
from ..wire import aggregate
from ..wire import responses as openai_responses
from ..wire.keys import is_token_ids, split_prompts

RECORD_VERSION = 1
MARKER = "replay_record"


# Fields that only shape the transport, never the answer: not saved, not compared.
TRANSPORT_FIELDS = frozenset({"stream", "stream_options", "user"})
MISSING: Any = object()  # stands for a field that is not there at all (null is there)


@dataclass(slots=True)
class Record:
    endpoint: str
    model: str
    request: dict[str, Any]
    response: dict[str, Any] | None
    source: dict[str, Any]
    unusable: str | None = None
    sample_usage: list[dict[str, Any] | None] | None = None
    origin: str = ""  # the file this record was read from (`source.file` may name another)
    # Other forms in which a client sends this same request (lm-eval's token ids for a
    # saved text prompt): each is keyed too, and answered by this same exchange.
    also: list[dict[str, Any]] | None = None
    stream: list[str] | None = None  # a recorded stream's SSE frames, as sent
    batch: dict[str, Any] | None = None  # the batched completion this prompt was part of

    @property
    def run(self) -> str:
        """Which run the record belongs to: `source.run` (the recorder and `convert` write
        one), else the file it was read from. Records of different runs never form one
        instance, even when their `source.file` and `source.instance` agree."""
        run = self.source.get("run")
        return run if isinstance(run, str) else self.origin

    @property
    def where(self) -> str:
        """FILE:LINE (plus the instance when known) of the saved exchange."""
        source = self.source
        return where_of(source.get("file"), source.get("line"), source.get("instance"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            MARKER: RECORD_VERSION,
            "endpoint": self.endpoint,
            "model": self.model,
            "request": self.request,
            "response": self.response,
        }
        if self.unusable is not None:
            out["unusable"] = self.unusable
        if self.sample_usage is not None:
            out["sample_usage"] = self.sample_usage
        if self.also:
            out["also_requests"] = self.also
        if self.stream is not None:
            out["stream"] = self.stream
        if self.batch is not None:
            out["batch"] = self.batch
        out["source"] = self.source
        return out


def dump_line(record: Record) -> bytes:
    return orjson.dumps(record.to_json()) + b"\n"


def strip_transport(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in TRANSPORT_FIELDS}


@dataclass(slots=True)
class _Check:
    """Field checks that raise a LoadError naming the file, line and field."""

    file: str
    line: int | None
    prefix: str = field(default="")

    def fail(self, name: str, reason: str) -> LoadError:
        return LoadError(self.file, self.line, reason, field=self.prefix + name)

    def get(self, obj: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
        return self.value(name, obj.get(name, MISSING), kind)

    def value(self, name: str, value: Any, kind: type | tuple[type, ...]) -> Any:
        """`value` if it has the type `kind`; MISSING is a field that is not there."""
        if value is MISSING:
            raise self.fail(name, "missing")
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise self.fail(name, f"expected {_kind_name(kind)}, got {_json_type(value)}")
        return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


# A saved message with any of these set is an answer (a refusal is one too).
ANSWER_FIELDS = ("content", "refusal", "tool_calls", "function_call", "reasoning",
                 "reasoning_content")
# The shape of each answer field, checked when a record is read: the streamed replay
# takes them apart, so a wrong shape is a bad saved line, not a 500 on some request.
_MESSAGE_SHAPES: dict[str, tuple[tuple[type, ...], str]] = {
    "content": ((str, list), "a string, a list of content parts or null"),
    "refusal": ((str,), "a string or null"),
    "reasoning": ((str,), "a string or null"),
    "reasoning_content": ((str,), "a string or null"),
    "tool_calls": ((list,), "a list of tool-call objects or null"),
    "function_call": ((dict,), "an object or null"),
    "role": ((str,), "a string"),
}


def _check_message(message: dict[str, Any], check: _Check, at: str) -> None:
    for name, (types, words) in _MESSAGE_SHAPES.items():
        value = message.get(name)
        if value is not None and not isinstance(value, types):
            raise check.fail(f"{at}.message.{name}", f"expected {words}, got "
                             f"{_json_type(value)}")
    calls = message.get("tool_calls") or []
    if not all(isinstance(c, dict) and isinstance(c.get("function", {}), dict) for c in calls):
        raise check.fail(f"{at}.message.tool_calls", "expected a list of tool-call objects, "
                         "each with a `function` object")


def choice_unusable(endpoint: str, choice: dict[str, Any]) -> str | None:
    """Why a saved choice is not an answer, or None. An empty string is an answer."""
    if endpoint == COMPLETION_PATH:
        return None if isinstance(choice.get("text"), str) else "saved text is null or missing"
    message = choice.get("message")
    if not isinstance(message, dict):
        return "saved message is null or missing"
    if all(message.get(f) is None for f in ANSWER_FIELDS):
        return "saved message has no content, refusal, reasoning or tool calls"
    return None


def validate(obj: Any, file: str, line: int | None) -> Record:
    """A native record from one parsed JSONL line, or a LoadError saying what is wrong."""
    record = plain_record(obj, file, line)
    return record if record is not None else validate_precisely(obj, file, line)


# A plain record has these fields and no others (no stream, batch, sample usage or other
# forms of its request).
_PLAIN_FIELDS = frozenset({MARKER, "endpoint", "model", "request", "response", "source"})
_PLAIN_ANSWERS = {CHAT_PATH: "message", COMPLETION_PATH: "text"}
_NOT_TEXT = frozenset({"tool_calls", "function_call"})  # a string there is a bad shape


def plain_record(obj: Any, file: str, line: int | None) -> Record | None:
    """The record a saved line of the common shape makes, checked in one pass, or None.

    The common shape: a chat or completions record with one prompt, whose choices are in
    order (`index` 0..n-1) and each a plain answer (a message of strings and nulls with
    `content`, or a `text`), with nothing optional but `source`. It is what most saved
    lines are, and checking it field by field costs more than parsing the line. This only
    ever says yes to a line that `validate_precisely` accepts, as the same record (the
    tests hold it to that on mutated records); for every other line it says None, and the
    precise checks decide, naming the file, line and field of whatever is wrong.
    """
    if type(obj) is not dict or obj.keys() != _PLAIN_FIELDS or type(obj[MARKER]) is not int \
            or obj[MARKER] != RECORD_VERSION:
        return None
    endpoint, model, request = obj["endpoint"], obj["model"], obj["request"]
    if type(endpoint) is not str or type(model) is not str or not model or \
            type(request) is not dict:
        return None
    want = _PLAIN_ANSWERS.get(endpoint)
    if want is None:
        return None
    if want == "message":
        messages = request.get("messages")
        if type(messages) is not list or not messages:
            return None
        for message in messages:
            if type(message) is not dict:
                return None
    elif type(request.get("prompt")) is not str and not is_token_ids(request.get("prompt")):
        return None
    source = obj["source"]
    if source is None:
        source = {"file": file, "line": line}
    elif type(source) is dict and isinstance(source.get("file"), _SCALAR) and \
            isinstance(source.get("line"), _SCALAR) and \
            isinstance(source.get("instance"), _SCALAR) and isinstance(source.get("run"), _SCALAR):
        source = {"file": file, "line": line, **source}
    else:
        return None
    response = obj["response"]
    choices = response.get("choices") if type(response) is dict else None
    if type(choices) is not list or not choices:
        return None
    for i, choice in enumerate(choices):
        if type(choice) is not dict or type(choice.get("index")) is not int or \
                choice["index"] != i or not _plain_answer(choice, want):
            return None
    if "stream" in request or "stream_options" in request or "user" in request:
        request = strip_transport(request)
    return Record(endpoint, model, request, response, source, origin=file)


def _plain_answer(choice: dict[str, Any], want: str) -> bool:
    """Whether a choice is a plain answer: a `text`, or a `message` of strings and nulls
    with `content`."""
    if want == "text":  # (a completion choice's `message`, if any, is checked too)
        return type(choice.get("text")) is str and choice.get("message") is None
    answer = choice.get("message")
    if type(answer) is not dict or answer.get("content") is None:
        return False
    for name, value in answer.items():
        if value is not None and (type(value) is not str or name in _NOT_TEXT):
            return False
    return True


def validate_precisely(obj: Any, file: str, line: int | None) -> Record:
    """`validate`, field by field: a LoadError names what is wrong with any line."""
    check = _Check(file, line)
    if not isinstance(obj, dict):
        raise LoadError(file, line, f"expected a JSON object, got {_json_type(obj)}")
    version = check.get(obj, MARKER, int)
    if version != RECORD_VERSION:
        raise check.fail(MARKER, f"record format version {version} is not supported "
                                 f"(this replay-server reads version {RECORD_VERSION})")
    return make_record(obj.get("endpoint", MISSING), obj.get("model", MISSING),
                       obj.get("request", MISSING), obj.get("response"), obj.get("source"),
                       file, line, unusable=obj.get("unusable"),
                       sample_usage=obj.get("sample_usage"), also=obj.get("also_requests"),
                       stream=obj.get("stream"), batch=obj.get("batch"))


def make_record(endpoint: Any, model: Any, request: Any, response: Any, source: Any,
                file: str, line: int | None, *, unusable: Any = None,
                sample_usage: Any = None, also: Any = None, stream: Any = None,
                batch: Any = None) -> Record:
    """A native record from its parts, checked exactly as `validate` checks a saved line
    (a LoadError names FILE:LINE and the field): how readers make their records.

    `source` gets the file and line unless it names its own; the request loses its
    transport-only fields; the response's choices are put in index order; a record whose
    choices are not answers (null text, empty message) is marked unusable, saying why.
    """
    check = _Check(file, line)
    endpoint = check.value("endpoint", endpoint, str)
    if endpoint not in ENDPOINTS:
        raise check.fail("endpoint", f"expected one of {', '.join(ENDPOINTS)}, got {endpoint!r}")
    model = check.value("model", model, str)
    if not model:
        raise check.fail("model", "must not be empty")
    request = check.value("request", request, dict)
    _validate_prompt(endpoint, request, _Check(file, line, "request."))
    source = _source(source, file, line, check)
    forms = _also(endpoint, also, check)
    batch = _batch(batch, endpoint, check)
    if response is None:
        if not isinstance(unusable, str) or not unusable:
            raise check.fail("response", "is null, so `unusable` must say why")
        return Record(endpoint, model, strip_transport(request), None, source, unusable,
                      origin=file, also=forms, batch=batch)
    if not isinstance(response, dict):
        raise check.fail("response", f"expected an object or null, got {_json_type(response)}")
    if endpoint == RESPONSES_PATH:
        reason = _responses_unusable(response, _Check(file, line, "response."))
        frames = _stream(stream, endpoint, response, check)
        return Record(endpoint, model, strip_transport(request), response, source, reason,
                      origin=file, also=forms, stream=frames)
    response = normalise_choices(response, endpoint, _Check(file, line, "response."))
    usage = _sample_usage(sample_usage, len(response["choices"]), check)
    frames = _stream(stream, endpoint, response, check)
    reasons = {choice_unusable(endpoint, c) for c in response["choices"]} - {None}
    record = Record(endpoint, model, strip_transport(request), response, source,
                    None, usage, origin=file, also=forms, stream=frames, batch=batch)
    if reasons:
        record.unusable = sorted(r for r in reasons if r)[0]
    return record


def _also(endpoint: str, also: Any, check: _Check) -> list[dict[str, Any]] | None:
    if also is None:
        return None
    if not isinstance(also, list) or not all(isinstance(r, dict) for r in also):
        raise check.fail("also_requests", "expected a list of request objects")
    for i, request in enumerate(also):
        _validate_prompt(endpoint, request, _Check(check.file, check.line,
                                                   f"also_requests[{i}]."))
    return [strip_transport(r) for r in also] or None


# A saved Responses answer with one of these statuses is not an answer (it failed, or was
# saved before it was done).
_NOT_DONE = frozenset({"failed", "cancelled", "queued", "in_progress"})


def _responses_unusable(response: dict[str, Any], check: _Check) -> str | None:
    """Check a saved Responses body's shape; why it is not an answer, or None. An empty
    `output` is an answer (vLLM leaves out the message of an empty text)."""
    output = check.get(response, "output", list)
    for i, item in enumerate(output):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise check.fail(f"output[{i}]", "expected an item object with a string `type`")
        for name in ("content", "summary"):
            if item.get(name) is not None and not isinstance(item[name], list):
                raise check.fail(f"output[{i}].{name}", "expected a list of parts or null")
    status = response.get("status")
    if status in _NOT_DONE:
        error = response.get("error")
        why = f": {orjson.dumps(error).decode()[:200]}" if error else ""
        return f"the saved response's status is {status!r}{why}"
    return None


def _stream(frames: Any, endpoint: str, response: dict[str, Any], check: _Check
            ) -> list[str] | None:
    """The saved frames of a recorded stream, checked for shape. That they aggregate to
    the saved response (a replay sends them as they are) is checked the first time they
    are served (`stream_mismatch`): aggregating hundreds of frames per record would make
    loading a big recording many times slower."""
    if frames is None:
        return None
    if not isinstance(frames, list) or not frames or not all(
            isinstance(f, str) and f for f in frames):
        raise check.fail("stream", "expected a non-empty list of SSE frames (strings)")
    return frames


def stream_mismatch(endpoint: str, frames: bytes, response: dict[str, Any]) -> str | None:
    """Why saved frames cannot be served for this saved response, or None: they must
    aggregate to it exactly, or a streamed replay would send another answer than a plain
    one (a response edited by hand, its frames left as they were)."""
    try:
        if endpoint == RESPONSES_PATH:
            got = openai_responses.aggregate(frames).response
        else:
            got = normalise_choices(aggregate.whole(frames, endpoint == CHAT_PATH), endpoint,
                                    _Check("(stream)", None))
    except (aggregate.StreamError, openai_responses.ResponsesStreamError, LoadError) as e:
        return f"the saved stream cannot be read: {e}"
    if got != response:
        return ("the saved stream does not aggregate to the saved `response`: a streamed "
                "replay would send another answer than a plain one")
    return None


def _batch(batch: Any, endpoint: str, check: _Check) -> dict[str, Any] | None:
    if batch is None:
        return None
    if endpoint != COMPLETION_PATH or not isinstance(batch, dict):
        raise check.fail("batch", "expected an object, on a /v1/completions record only")
    if not isinstance(batch.get("id"), str):
        raise check.fail("batch.id", "expected a string")
    size, index = batch.get("size"), batch.get("index")
    if not (isinstance(size, int) and isinstance(index, int) and 0 <= index < size):
        raise check.fail("batch", "expected integers `size` and `index`, 0 <= index < size")
    if batch.get("usage") is not None and not isinstance(batch["usage"], dict):
        raise check.fail("batch.usage", "expected an object or null")
    return batch


_SCALAR = (str, int, float, bool, type(None))


def _source(source: Any, file: str, line: int | None, check: _Check) -> dict[str, Any]:
    """`source`, with the file and line it was read at unless it names its own. The fields
    that identify an instance must be plain values (they are compared and hashed)."""
    source = source or {}
    if not isinstance(source, dict):
        raise check.fail("source", f"expected an object, got {_json_type(source)}")
    for name in ("file", "line", "instance", "run"):
        if not isinstance(source.get(name), _SCALAR):
            raise check.fail(f"source.{name}", "expected a string, a number or null, got "
                             f"{_json_type(source[name])}")
    return {"file": file, "line": line, **source}


def _validate_prompt(endpoint: str, request: dict[str, Any], check: _Check) -> None:
    if endpoint == RESPONSES_PATH:
        value = request.get("input")
        if not isinstance(value, str | list):
            raise check.fail("input", "expected a string or a list of input items")
        return
    if endpoint == CHAT_PATH:
        messages = check.get(request, "messages", list)
        if not messages or not all(isinstance(m, dict) for m in messages):
            raise check.fail("messages", "expected a non-empty list of message objects")
        return
    prompt = request.get("prompt")
    if not (isinstance(prompt, str) or is_token_ids(prompt)):
        raise check.fail("prompt", "expected one prompt: a string or a list of token ids "
                                   "(a batch is saved as one record per prompt)")


def normalise_choices(response: dict[str, Any], endpoint: str, check: _Check) -> dict[str, Any]:
    """The response with its choices in index order and indexed 0..n-1."""
    choices = check.get(response, "choices", list)
    if not choices or not all(isinstance(c, dict) for c in choices):
        raise check.fail("choices", "expected a non-empty list of choice objects")
    if len(choices) > 1 and all(isinstance(c.get("index"), int) for c in choices):
        choices = sorted(choices, key=lambda c: c["index"])
    want = "message" if endpoint == CHAT_PATH else "text"
    for i, choice in enumerate(choices):
        if want not in choice:
            raise check.fail(f"choices[{i}].{want}", "missing")
        if isinstance(choice.get("message"), dict):
            _check_message(choice["message"], check, f"choices[{i}]")
    if all(c.get("index") == i for i, c in enumerate(choices)) and choices is response[
            "choices"]:
        return response  # already in order and indexed (the usual case): not copied
    return {**response, "choices": [{**c, "index": i} for i, c in enumerate(choices)]}


def _sample_usage(usage: Any, n: int, check: _Check) -> list[Any] | None:
    if usage is None:
        return None
    if not isinstance(usage, list) or len(usage) != n:
        raise check.fail("sample_usage", f"expected a list of {n} usage objects or nulls")
    if not all(u is None or isinstance(u, dict) for u in usage):
        raise check.fail("sample_usage", "expected usage objects or nulls")
    return usage


def split_batch(
    request: dict[str, Any], response: dict[str, Any]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """One (request, response) per prompt of a batched completion exchange.

    Choice `prompt_index * n + j` goes to prompt `prompt_index`. The batch's `usage` covers
    every prompt together and cannot be split, so each part's usage is null (`batch_parts`
    also says which batch each part came from, with its usage).
    """
    return [(r, b) for r, b, _ in batch_parts(request, response, "")]


def batch_parts(
    request: dict[str, Any], response: dict[str, Any], batch_id: str
) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]]:
    """(request, response, batch) per prompt of a batched completion exchange: as
    `split_batch`, and `batch` = `{"id": batch_id, "index", "size", "usage"}` keeps the
    batch's usage, which a replay of the same batch serves again. A single prompt has no
    batch."""
    prompts = split_prompts(request.get("prompt"))
    if prompts is None or len(prompts) == 1:
        return [(request, response, None)]
    choices = sorted(response.get("choices") or [], key=lambda c: c.get("index", 0))
    n = len(choices) // len(prompts)
    if n == 0 or n * len(prompts) != len(choices):
        raise ValueError(f"{len(choices)} choices do not split evenly over {len(prompts)} prompts")
    parts: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]] = []
    for i, prompt in enumerate(prompts):
        mine = [{**c, "index": j} for j, c in enumerate(choices[i * n:(i + 1) * n])]
        batch = {"id": batch_id, "index": i, "size": len(prompts),
                 "usage": response.get("usage")}
        parts.append(({**request, "prompt": prompt}, {**response, "choices": mine,
                                                      "usage": None}, batch))
    return parts
