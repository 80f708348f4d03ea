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

The endpoint is `/v1/chat/completions`, `/v1/completions`, `/v1/responses` (whose
`response` is the final response object), or Anthropic's `/v1/messages` (the message) and
`/v1/messages/count_tokens` (`{"input_tokens": N}`); a Messages request keeps its
`anthropic-beta` header as the field of that name. Or one of vLLM's tokenizer endpoints
(`/tokenize`, `/detokenize`, `/tokenizer_info`: a recorded answer, never a generation,
which the index keeps apart from the generations), or `/v1/models`, whose `response` is
one model's entry of the list (its `max_model_len`).
A completion record holds one prompt: a batch is saved as one record per prompt, each with
`batch` (the batch's `usage`, which cannot be split, and the prompt's place in it).
`stream` is optional (records without it are read as before): the frames of a recorded
stream, exactly as the upstream sent them, which must aggregate to `response`. Every
reader yields these; the recorder and `convert` write them; the index reads nothing else.
This module validates and serialises records; it never decides what to serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import BadRequest, LoadError, where_of
from ..paths import (
    CHAT_PATH,
    COMPLETION_PATH,
    COUNT_TOKENS_PATH,
    ENDPOINTS,
    MESSAGES_PATH,
    MODELS_PATH,
    NO_GENERATION,
    RESPONSES_PATH,
)
from ..wire import tokenizer
from ..wire.completions.request import is_token_ids, split_prompts
from ..wire.families import family_of
from ..wire.json_types import class_words, type_name
from ..wire.sse import StreamError

RECORD_VERSION = 1
MARKER = "replay_record"


# Fields that only shape the transport, never the answer: not saved, not compared.
TRANSPORT_FIELDS = frozenset({"stream", "stream_options", "user"})
MISSING: Any = object()  # stands for a field that is not there at all (null is there)


@dataclass(slots=True)
class Record:
    """One saved exchange, whatever wrote it: what a client sent and what it was answered.

    Every reader turns its harness's files into these, the recorder saves them, `convert`
    writes them, and the index reads nothing else: so a harness's quirks end in its reader,
    and matching, samples and replies are written once, for records. A record is made only
    by `make_record` (or `validate`, for a saved line), which checks it the same way
    whoever made it: a bad one is a LoadError naming FILE:LINE and the field, never a
    record that fails later, at some request. A response that is not an answer (a null
    text, a failed call) is kept, with `unusable` saying why: the prompt was saved, and a
    request for it is told so rather than missed.
    """

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
    """The request without its transport-only fields (itself when it has none)."""
    if "stream" in request or "stream_options" in request or "user" in request:
        return {k: v for k, v in request.items() if k not in TRANSPORT_FIELDS}
    return request


# How a saved line is checked: one pass, field by field, in the order the fields are listed
# below. Each check tests the exact JSON type first (what orjson gives, so the usual line
# costs a type comparison a field) and only then works out what is wrong, so that the
# error, which names FILE:LINE and the field, costs nothing until a line is bad.


def _fail(file: str, line: int | None, name: str, reason: str) -> LoadError:
    return LoadError(file, line, reason, field=name)


def _want(file: str, line: int | None, name: str, value: Any,
          kind: type | tuple[type, ...]) -> Any:
    """`value` if it has the type `kind` (a subclass too; a boolean is no integer); else
    the LoadError that says so. MISSING is a field that is not there."""
    if value is MISSING:
        raise _fail(file, line, name, "missing")
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _fail(file, line, name, f"expected {class_words(kind)}, got {type_name(value)}")
    return value


def validate(obj: Any, file: str, line: int | None) -> Record:
    """The native record of one parsed JSONL line, or a LoadError that names the line
    (`FILE:LINE`), the first field that is wrong and why."""
    if type(obj) is not dict and not isinstance(obj, dict):
        raise LoadError(file, line, f"expected a JSON object, got {type_name(obj)}")
    version = obj.get(MARKER, MISSING)
    if type(version) is not int or version != RECORD_VERSION:
        version = _want(file, line, MARKER, version, int)
        if version != RECORD_VERSION:
            raise _fail(file, line, MARKER, f"record format version {version} is not "
                        f"supported (this replay-server reads version {RECORD_VERSION})")
    get = obj.get
    return make_record(get("endpoint", MISSING), get("model", MISSING), get("request", MISSING),
                       get("response"), get("source"), file, line, get("unusable"),
                       get("sample_usage"), get("also_requests"), get("stream"), get("batch"))


def make_record(endpoint: Any, model: Any, request: Any, response: Any, source: Any,
                file: str, line: int | None, unusable: Any = None,
                sample_usage: Any = None, also: Any = None, stream: Any = None,
                batch: Any = None) -> Record:
    """A native record from its parts, checked exactly as `validate` checks a saved line
    (a LoadError names FILE:LINE and the field): how readers make their records.

    `source` gets the file and line unless it names its own; the request loses its
    transport-only fields; the response's choices are put in index order; a record whose
    choices are not answers (null text, empty message) is marked unusable, saying why.
    """
    if type(endpoint) is not str or endpoint not in ENDPOINTS:
        endpoint = _want(file, line, "endpoint", endpoint, str)
        if endpoint in NO_GENERATION:
            return _no_generation(endpoint, model, request, response, source, file, line)
        if endpoint not in ENDPOINTS:
            raise _fail(file, line, "endpoint", "expected one of "
                        f"{', '.join(ENDPOINTS + NO_GENERATION)}, got {endpoint!r}")
    if type(model) is not str or not model:
        if not _want(file, line, "model", model, str):
            raise _fail(file, line, "model", "must not be empty")
    if type(request) is not dict:
        request = _want(file, line, "request", request, dict)
    _check_prompt(endpoint, request, file, line, "request.")
    source = _source(source, file, line)
    forms = None if also is None else _also(endpoint, also, file, line)
    if batch is not None:
        _check_batch(batch, endpoint, file, line)
    request = strip_transport(request)
    if response is None:
        if not isinstance(unusable, str) or not unusable:
            raise _fail(file, line, "response", "is null, so `unusable` must say why")
        return Record(endpoint, model, request, None, source, unusable, origin=file,
                      also=forms, batch=batch)
    if type(response) is not dict and not isinstance(response, dict):
        raise _fail(file, line, "response",
                    f"expected an object or null, got {type_name(response)}")
    if family_of(endpoint).whole:
        reason = _WHOLE_UNUSABLE[endpoint](response, file, line)
        if stream is not None:
            _check_stream(stream, endpoint, response, file, line)
        return Record(endpoint, model, request, response, source, reason, origin=file,
                      also=forms, stream=stream)
    response, reason = _normalise_choices(response, endpoint, file, line, "response.")
    if sample_usage is not None:
        _check_sample_usage(sample_usage, len(response["choices"]), file, line)
    if stream is not None:
        _check_stream(stream, endpoint, response, file, line)
    return Record(endpoint, model, request, response, source, reason, sample_usage, file,
                  forms, stream, batch)


def _no_generation(endpoint: str, model: Any, request: Any, response: Any, source: Any,
                   file: str, line: int | None) -> Record:
    """A recorded exchange that carries no generation: a tokenizer call vLLM accepts and
    the answer it gave, or one model's entry in `/v1/models` (never unusable: recorded
    only when it was answered)."""
    if type(model) is not str or not model:
        if not _want(file, line, "model", model, str):
            raise _fail(file, line, "model", "must not be empty")
    if type(request) is not dict:
        request = _want(file, line, "request", request, dict)
    if endpoint == MODELS_PATH:
        problem = _model_entry_problem(model, response)
    else:
        try:
            tokenizer.check(endpoint, request)
        except BadRequest as e:
            raise _fail(file, line, "request", str(e)) from None
        problem = tokenizer.answer_problem(endpoint, response)
    if problem is not None:
        raise _fail(file, line, "response", problem)
    return Record(endpoint, model, request, response, _source(source, file, line),
                  origin=file)


def _model_entry_problem(model: str, response: Any) -> str | None:
    if not isinstance(response, dict) or response.get("id") != model:
        return "expected the model's entry of /v1/models (an object whose `id` is `model`)"
    length = response.get("max_model_len")
    if length is not None and type(length) is not int:
        return "`max_model_len` must be an integer"
    return None


def _check_prompt(endpoint: str, request: dict[str, Any], file: str, line: int | None,
                  at: str) -> None:
    """The request holds one prompt of its endpoint's kind."""
    if endpoint == CHAT_PATH:
        messages = request.get("messages", MISSING)
        if type(messages) is not list:
            messages = _want(file, line, at + "messages", messages, list)
        for message in messages:
            if type(message) is not dict and not isinstance(message, dict):
                break
        else:
            if messages:
                return
        raise _fail(file, line, at + "messages", "expected a non-empty list of message objects")
    if endpoint == COMPLETION_PATH:
        prompt = request.get("prompt")
        if not (isinstance(prompt, str) or is_token_ids(prompt)):
            raise _fail(file, line, at + "prompt", "expected one prompt: a string or a list "
                        "of token ids (a batch is saved as one record per prompt)")
    elif endpoint == RESPONSES_PATH:
        if not isinstance(request.get("input"), str | list):
            raise _fail(file, line, at + "input", "expected a string or a list of input items")
    else:  # Messages, count_tokens
        messages = request.get("messages")
        if not (isinstance(messages, list) and messages
                and all(isinstance(m, dict) for m in messages)):
            raise _fail(file, line, at + "messages",
                        "expected a non-empty list of message objects")


# A source's fields that identify an instance: compared and hashed, so plain values only.
_IDENTITY = ("file", "line", "instance", "run")
_SCALARS = frozenset({str, int, float, bool, type(None)})
_SCALAR = (str, int, float, bool, type(None))


def _source(source: Any, file: str, line: int | None) -> dict[str, Any]:
    """`source`, with the file and line it was read at unless it names its own."""
    if source is None:
        return {"file": file, "line": line}
    if type(source) is not dict and not isinstance(source, dict):
        raise _fail(file, line, "source", f"expected an object, got {type_name(source)}")
    get = source.get
    if type(get("file")) not in _SCALARS or type(get("line")) not in _SCALARS or type(
            get("instance")) not in _SCALARS or type(get("run")) not in _SCALARS:
        for name in _IDENTITY:
            if not isinstance(get(name), _SCALAR):
                raise _fail(file, line, f"source.{name}", "expected a string, a number or "
                            f"null, got {type_name(get(name))}")
    return {"file": file, "line": line, **source}


def _also(endpoint: str, also: Any, file: str, line: int | None) -> list[dict[str, Any]] | None:
    if not isinstance(also, list) or not all(isinstance(r, dict) for r in also):
        raise _fail(file, line, "also_requests", "expected a list of request objects")
    for i, request in enumerate(also):
        _check_prompt(endpoint, request, file, line, f"also_requests[{i}].")
    return [strip_transport(r) for r in also] or None


def _check_batch(batch: Any, endpoint: str, file: str, line: int | None) -> None:
    if endpoint != COMPLETION_PATH or not isinstance(batch, dict):
        raise _fail(file, line, "batch", "expected an object, on a /v1/completions record only")
    if not isinstance(batch.get("id"), str):
        raise _fail(file, line, "batch.id", "expected a string")
    size, index = batch.get("size"), batch.get("index")
    if not (isinstance(size, int) and isinstance(index, int) and 0 <= index < size):
        raise _fail(file, line, "batch", "expected integers `size` and `index`, "
                    "0 <= index < size")
    if batch.get("usage") is not None and not isinstance(batch["usage"], dict):
        raise _fail(file, line, "batch.usage", "expected an object or null")


def _normalise_choices(response: dict[str, Any], endpoint: str, file: str, line: int | None,
                      at: str) -> tuple[dict[str, Any], str | None]:
    """The response with its choices in index order and indexed 0..n-1 (itself when they
    are: the usual case is not copied), each checked for shape; and why its choices are not
    an answer, or None."""
    choices = response.get("choices", MISSING)
    if type(choices) is not list:
        choices = _want(file, line, at + "choices", choices, list)
    in_order = True
    choice: Any = None
    for i, choice in enumerate(choices):
        if type(choice) is not dict and not isinstance(choice, dict):
            break
        index = choice.get("index")
        if index != i or type(index) is not int:  # (an index `false` is no 0)
            in_order = False
    if not choices or type(choice) is not dict and not isinstance(choice, dict):
        raise _fail(file, line, at + "choices", "expected a non-empty list of choice objects")
    if not in_order and len(choices) > 1 and all(isinstance(c.get("index"), int)
                                                 for c in choices):
        choices = sorted(choices, key=lambda c: c["index"])
    want = "message" if endpoint == CHAT_PATH else "text"
    reason = None  # the first, in sorted order, of the reasons why a choice is no answer
    for i, choice in enumerate(choices):
        if want not in choice:
            raise _fail(file, line, f"{at}choices[{i}].{want}", "missing")
        message = choice.get("message")
        if type(message) is dict or isinstance(message, dict):
            _check_message(message, file, line, f"{at}choices[{i}].message")
        why = _choice_unusable(endpoint, choice, message)
        if why is not None and (reason is None or why < reason):
            reason = why
    if in_order and choices is response["choices"]:
        return response, reason
    return {**response, "choices": [{**c, "index": i} for i, c in enumerate(choices)]}, reason


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


_MESSAGE_TYPES = {name: types for name, (types, _) in _MESSAGE_SHAPES.items()}
_NOT_TEXT = frozenset({"tool_calls", "function_call"})  # the fields a string is wrong in


def _check_message(message: dict[str, Any], file: str, line: int | None, at: str) -> None:
    for name, value in message.items():
        if value is None or type(value) is str and name not in _NOT_TEXT:
            continue
        types = _MESSAGE_TYPES.get(name)
        if types is not None and not isinstance(value, types):
            break
    else:
        calls = message.get("tool_calls")
        if calls and not all(isinstance(c, dict) and isinstance(c.get("function", {}), dict)
                             for c in calls):
            raise _fail(file, line, f"{at}.tool_calls", "expected a list of tool-call "
                        "objects, each with a `function` object")
        return
    for name, (types, words) in _MESSAGE_SHAPES.items():  # the first in this order is named
        value = message.get(name)
        if value is not None and not isinstance(value, types):
            raise _fail(file, line, f"{at}.{name}", f"expected {words}, got {type_name(value)}")


def _choice_unusable(endpoint: str, choice: dict[str, Any], message: Any) -> str | None:
    """Why a saved choice (and its `message`) is not an answer, or None. An empty string is
    an answer."""
    if endpoint == COMPLETION_PATH:
        return None if isinstance(choice.get("text"), str) else "saved text is null or missing"
    if not isinstance(message, dict):
        return "saved message is null or missing"
    if message.get("content") is None and all(message.get(f) is None for f in ANSWER_FIELDS):
        return "saved message has no content, refusal, reasoning or tool calls"
    return None


def _check_sample_usage(usage: Any, n: int, file: str, line: int | None) -> None:
    if not isinstance(usage, list) or len(usage) != n:
        raise _fail(file, line, "sample_usage", f"expected a list of {n} usage objects or nulls")
    if not all(u is None or isinstance(u, dict) for u in usage):
        raise _fail(file, line, "sample_usage", "expected usage objects or nulls")


# A saved Responses answer with one of these statuses is not an answer (it failed, or was
# saved before it was done).
_NOT_DONE = frozenset({"failed", "cancelled", "queued", "in_progress"})


def _typed_list(response: dict[str, Any], name: str, what: str, file: str,
                line: int | None) -> list[Any]:
    """`response[name]`, checked to be a list of objects (`what`) each with a string
    `type`: a Responses body's `output` items, a Messages body's `content` blocks."""
    value = response.get(name, MISSING)
    items: list[Any] = value if type(value) is list else _want(
        file, line, f"response.{name}", value, list)
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise _fail(file, line, f"response.{name}[{i}]",
                        f"expected {what} with a string `type`")
    return items


def _responses_unusable(response: dict[str, Any], file: str, line: int | None) -> str | None:
    """Check a saved Responses body's shape; why it is not an answer, or None. An empty
    `output` is an answer (vLLM leaves out the message of an empty text)."""
    for i, item in enumerate(_typed_list(response, "output", "an item object", file, line)):
        for name in ("content", "summary"):
            if item.get(name) is not None and not isinstance(item[name], list):
                raise _fail(file, line, f"response.output[{i}].{name}",
                            "expected a list of parts or null")
    status = response.get("status")
    if status is not None and not isinstance(status, str):
        raise _fail(file, line, "response.status",
                    f"expected a string or null, got {type_name(status)}")
    if status in _NOT_DONE:
        error = response.get("error")
        why = f": {orjson.dumps(error).decode()[:200]}" if error else ""
        return f"the saved response's status is {status!r}{why}"
    return None


def _message_unusable(response: dict[str, Any], file: str, line: int | None) -> str | None:
    """Check a saved Messages body's shape; why it is not an answer, or None. An empty
    `content` is an answer; a message never finished (no `stop_reason`) is not."""
    if response.get("type") == "error":
        return f"the saved answer is an error: {orjson.dumps(response.get('error')).decode()[:200]}"
    _typed_list(response, "content", "a block object", file, line)
    stop = response.get("stop_reason")
    if stop is not None and not isinstance(stop, str):
        raise _fail(file, line, "response.stop_reason",
                    f"expected a string or null, got {type_name(stop)}")
    return None if stop is not None else "the saved message has no `stop_reason`: unfinished"


def _count_unusable(response: dict[str, Any], file: str, line: int | None) -> str | None:
    """A saved count_tokens answer: `input_tokens`, an integer."""
    _want(file, line, "response.input_tokens", response.get("input_tokens", MISSING), int)
    return None


# Why a saved body that answers whole (`Family.whole`) is no answer, by endpoint.
_WHOLE_UNUSABLE = {RESPONSES_PATH: _responses_unusable, MESSAGES_PATH: _message_unusable,
                   COUNT_TOKENS_PATH: _count_unusable}


def _check_stream(frames: Any, endpoint: str, response: dict[str, Any], file: str,
                  line: int | None) -> None:
    """The saved frames of a recorded stream: SSE frames (strings) that aggregate to the
    saved response. A streamed replay sends them as they are, so frames that say another
    thing than the response are a bad saved line, named when the file is loaded (by every
    command that reads it), never found out by the first client that streams them."""
    if not isinstance(frames, list) or not frames or not all(
            isinstance(f, str) and f for f in frames):
        raise _fail(file, line, "stream", "expected a non-empty list of SSE frames (strings)")
    why = _stream_mismatch(endpoint, "".join(frames).encode(), response)
    if why is not None:
        raise _fail(file, line, "stream", why)


def _stream_mismatch(endpoint: str, frames: bytes, response: dict[str, Any]) -> str | None:
    """Why saved frames cannot be served for this saved response, or None: they must
    aggregate to it exactly, or a streamed replay would send another answer than a plain
    one (a response edited by hand, its frames left as they were)."""
    try:
        got = family_of(endpoint).aggregate(frames)
        if not family_of(endpoint).whole:
            got, _ = _normalise_choices(got, endpoint, "(stream)", None, "")
    except (StreamError, LoadError) as e:
        return f"the saved stream cannot be read: {e}"
    if got != response:
        return ("the saved stream does not aggregate to the saved `response`: a streamed "
                "replay would send another answer than a plain one")
    return None


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
