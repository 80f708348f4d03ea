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

The endpoint is an API family's (`wire/families.py`: its `response` is what the API
answers, as the family's `answer.py` checks it: the final response object of
`/v1/responses`, `{"input_tokens": N}` of count_tokens), or one of vLLM's tokenizer
endpoints (a recorded answer, never a generation, which the index keeps apart), or
`/v1/models`, whose `response` is one model's entry of the list (its `max_model_len`).
A record holds one prompt: a recorded batch of completions is saved one record per prompt,
each with `batch` (the batch's `usage`, which cannot be split, and the prompt's place).
`stream` is optional (records without it are read as before): the frames of a recorded
stream, exactly as the upstream sent them, which must aggregate to `response`. Every
reader yields these; the recorder and `convert` write them; the index reads nothing else.
This module validates and serialises records; it never decides what to serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import BadRequest, LoadError, shown_file, where_of
from ..paths import MODELS_PATH, NO_GENERATION
from ..wire import tokenizer
from ..wire.answer import MISSING, BadAnswer, want
from ..wire.families import ENDPOINTS, FAMILIES
from ..wire.family import Family
from ..wire.json_types import type_name
from ..wire.models import entry_problem

RECORD_VERSION = 1
MARKER = "replay_record"


# Fields that only shape the transport, never the answer: not saved, not compared.
TRANSPORT_FIELDS = frozenset({"stream", "stream_options", "user"})


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


def _fail(file: str, line: int | None, name: str, reason: str) -> LoadError:
    return LoadError(file, line, reason, field=name)


def _want(file: str, line: int | None, name: str, value: Any,
          kind: type | tuple[type, ...]) -> Any:
    """`value` if it has the type `kind` (`wire.answer.want`); else the LoadError that says
    so."""
    try:
        return want(name, value, kind)
    except BadAnswer as e:
        raise _fail(file, line, e.field, e.reason) from None


def validate(obj: Any, file: str, line: int | None) -> Record:
    """The native record of one parsed JSONL line, or a LoadError that names the line
    (`FILE:LINE`), the first field that is wrong and why.

    One pass, field by field; the request and the response by their family
    (`Family.saved_request`, `Family.saved_answer`: each family's `answer.py`). Each check
    tests the exact JSON type first (what orjson gives, so the usual line costs a type
    comparison a field), so that the precise error costs nothing until a line is bad."""
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
    transport-only fields; the response is put in its family's normal form (a chat or
    completions body's choices in index order); a record whose response is not an answer
    (null text, an empty message, a failed response) is marked unusable, saying why.
    """
    file = shown_file(file)  # a fetched object's URL, not its cached copy
    family = FAMILIES.get(endpoint) if isinstance(endpoint, str) else None
    if family is None:
        endpoint = _want(file, line, "endpoint", endpoint, str)
        if endpoint in NO_GENERATION:
            return _no_generation(endpoint, model, request, response, source, file, line)
        raise _fail(file, line, "endpoint", "expected one of "
                    f"{', '.join(ENDPOINTS + NO_GENERATION)}, got {endpoint!r}")
    request = _model_and_request(model, request, file, line)
    _check_request(family, request, file, line, "request.")
    source = _source(source, file, line)
    forms = None if also is None else _also(family, also, file, line)
    if batch is not None:
        _check_batch(batch, family, file, line)
    request = strip_transport(request)
    if response is None:
        if not isinstance(unusable, str) or not unusable:
            raise _fail(file, line, "response", "is null, so `unusable` must say why")
        return Record(endpoint, model, request, None, source, unusable, origin=file,
                      also=forms, batch=batch)
    response, reason = _answer(family, response, file, line)
    if family.whole:
        if stream is not None:
            _check_stream(stream, family, response, file, line)
        return Record(endpoint, model, request, response, source, reason, origin=file,
                      also=forms, stream=stream)
    if sample_usage is not None:
        _check_sample_usage(sample_usage, family.samples(response), file, line)
    if stream is not None:
        _check_stream(stream, family, response, file, line)
    return Record(endpoint, model, request, response, source, reason, sample_usage, file,
                  forms, stream, batch)


def _no_generation(endpoint: str, model: Any, request: Any, response: Any, source: Any,
                   file: str, line: int | None) -> Record:
    """A recorded exchange that carries no generation: a tokenizer call vLLM accepts and
    the answer it gave, or one model's entry in `/v1/models` (never unusable: recorded
    only when it was answered)."""
    request = _model_and_request(model, request, file, line)
    if endpoint == MODELS_PATH:
        problem = entry_problem(model, response)
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


def _model_and_request(model: Any, request: Any, file: str, line: int | None
                       ) -> dict[str, Any]:
    """The request of a record whose `model` is a non-empty string."""
    if type(model) is not str or not model:
        if not _want(file, line, "model", model, str):
            raise _fail(file, line, "model", "must not be empty")
    checked: dict[str, Any] = request if type(request) is dict else _want(
        file, line, "request", request, dict)
    return checked


def _answer(family: Family, response: Any, file: str, line: int | None
            ) -> tuple[dict[str, Any], str | None]:
    """The saved response in its family's normal form, and why it is no answer, or None."""
    if type(response) is not dict and not isinstance(response, dict):
        raise _fail(file, line, "response",
                    f"expected an object or null, got {type_name(response)}")
    try:
        return family.saved_answer(response)
    except BadAnswer as e:
        raise _fail(file, line, f"response.{e.field}", e.reason) from None


def _check_request(family: Family, request: dict[str, Any], file: str, line: int | None,
                   at: str) -> None:
    """The request holds one prompt of its family's form."""
    try:
        family.saved_request(request)
    except BadAnswer as e:
        raise _fail(file, line, at + e.field, e.reason) from None


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


def _also(family: Family, also: Any, file: str, line: int | None
          ) -> list[dict[str, Any]] | None:
    if not isinstance(also, list) or not all(isinstance(r, dict) for r in also):
        raise _fail(file, line, "also_requests", "expected a list of request objects")
    for i, request in enumerate(also):
        _check_request(family, request, file, line, f"also_requests[{i}].")
    return [strip_transport(r) for r in also] or None


# The endpoints whose records may say which batch they were part of.
_BATCHED = " or ".join(f.path for f in FAMILIES.values() if f.batched)


def _check_batch(batch: Any, family: Family, file: str, line: int | None) -> None:
    if not family.batched or not isinstance(batch, dict):
        raise _fail(file, line, "batch", f"expected an object, on a {_BATCHED} record only")
    if not isinstance(batch.get("id"), str):
        raise _fail(file, line, "batch.id", "expected a string")
    size, index = batch.get("size"), batch.get("index")
    if not (isinstance(size, int) and isinstance(index, int) and 0 <= index < size):
        raise _fail(file, line, "batch", "expected integers `size` and `index`, "
                    "0 <= index < size")
    if batch.get("usage") is not None and not isinstance(batch["usage"], dict):
        raise _fail(file, line, "batch.usage", "expected an object or null")


def _check_sample_usage(usage: Any, n: int, file: str, line: int | None) -> None:
    if not isinstance(usage, list) or len(usage) != n:
        raise _fail(file, line, "sample_usage", f"expected a list of {n} usage objects or nulls")
    if not all(u is None or isinstance(u, dict) for u in usage):
        raise _fail(file, line, "sample_usage", "expected usage objects or nulls")


def _check_stream(frames: Any, family: Family, response: dict[str, Any], file: str,
                  line: int | None) -> None:
    """The saved frames of a recorded stream: SSE frames (strings) that aggregate to the
    saved response. A streamed replay sends them as they are, so frames that say another
    thing than the response are a bad saved line, named when the file is loaded (by every
    command that reads it), never found out by the first client that streams them."""
    if not isinstance(frames, list) or not frames or not all(
            isinstance(f, str) and f for f in frames):
        raise _fail(file, line, "stream", "expected a non-empty list of SSE frames (strings)")
    why = family.stream_problem("".join(frames).encode(), response)
    if why is not None:
        raise _fail(file, line, "stream", why)
