"""An API family (OpenAI chat, completions, Responses; Anthropic Messages): the one object
through which the rest of the server reads, keys, answers and records one wire API.

Each family is one package of the same shape (`fields.py` its field table and its own
normal forms, `request.py` its request checks and keyed prompts, `answer.py` what a
usable saved exchange of it is and what makes two saved generations the same,
`stream_out.py` its streams out, `stream_in.py` its streams in) whose `__init__` makes
its `Family`; the registry (`families.py`) imports each package and maps endpoint paths
to them. Nothing outside `wire` asks which family a request or a record is of: it asks
the family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from ..errors import BadRequest, ReplayServerError
from .answer import BadAnswer, itself
from .difference import Difference, first_difference
from .json_types import type_name
from .keys import Table, Unkeyable, key_of, unverbatim
from .models import models_body
from .selection import Saved, Selection
from .sse import StreamError

Prompts = Callable[[dict[str, Any], dict[str, Any] | None], list[dict[str, Any]] | None]
Body = dict[str, Any]
# (request, response, batch) of one prompt of a saved exchange (`Family.split`)
Part = tuple[Body, Body | None, Body | None]


class Aggregator(Protocol):
    """A stream in, fed as it arrives: `feed` says True once the stream's end has arrived;
    `result` is the body the same server would have answered non-streamed (`ended`: the
    stream's body has ended cleanly without its end marker, which some APIs accept). Both
    raise StreamError, and only that, for a stream that is no answer."""

    def feed(self, data: bytes) -> bool: ...

    def result(self, ended: bool = False) -> dict[str, Any]: ...


def _no_options(data: dict[str, Any]) -> tuple[int, bool]:
    return 1, False


def _no_usage(frames: list[str]) -> bool:
    return False


def _no_previous(request: dict[str, Any]) -> str | None:
    return None


def _one(body: Body) -> int:
    return 1


def _whole_exchange(request: Body, response: Body | None, batch_id: str) -> list[Part]:
    return [(request, response, None)]


def _finished(request: Body, body: Body) -> str | None:
    return None


def _claims_none(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return False


def _openai_error(error: ReplayServerError) -> dict[str, Any]:
    return error.body()


def _bearer(key: str) -> tuple[str, str]:
    return "authorization", f"Bearer {key}"


def _no_route(path: str, query: str) -> dict[str, Any] | None:
    return None


def _addressed_none(path: str, query: str) -> bool:
    return False


def _sse(data: dict[str, Any], stream: bytes) -> tuple[bytes, bytes]:
    return b"text/event-stream", stream


@dataclass(frozen=True)
class Family:
    """One wire API, as the rest of the server uses it.

    `name` is its package's; `kind` names it in keys, catalogs and the index file; `path`
    is its endpoint; `prompt_field` the request field a miss names. `check` raises
    BadRequest for a request the family cannot answer (beyond the table's type check);
    `prompts` gives the keyed prompts of a request or a saved record (None for a prompt of
    no valid form); `options` reads `n` and `stream_options.include_usage`. `reply` and
    `stream` make the answer from the saved exchanges chosen; `aggregator` reads a stream
    as it arrives, and `aggregate` a whole one (a recorded stream is loaded only if it
    aggregates to its saved body); `unfinished` says why the body of a stream that ended
    without its end marker is not the whole answer to its request; `carries_usage` says
    whether recorded frames carried the usage chunk; `error_body` is its error envelope
    (the OpenAI one unless the API has its own), which every error a request of the family
    gets is rendered in.

    What the family knows of its saved answers (`answer.py`): `saved_request` and
    `saved_answer` check a saved record's request (one prompt of the API's form) and
    response, raising `answer.BadAnswer` for a wrong shape, and say why a response is no
    answer (the response in its normal form, and the reason or None); `samples` counts a
    saved body's samples, `generations` gives their identities (two saved samples are the
    same generation when these are equal), and `split` makes a batched exchange one part
    per prompt.

    A *chained* family keys a request by the saved turn it continues (`previous_id`, then
    `previous_of` that turn's keyed prompt and response), so its requests are keyed once
    the model is known. A *batched* one takes several prompts in one request.
    """

    name: str
    kind: str
    path: str
    table: Table
    prompt_field: str
    check: Callable[[dict[str, Any]], None]
    prompts: Prompts
    reply: Callable[[Sequence[Selection[Saved]]], bytes]
    stream: Callable[[Sequence[Selection[Saved]], bool], bytes]
    aggregator: Callable[[], Aggregator]
    aggregate: Callable[[bytes], dict[str, Any]]
    schema: dict[str, Any]
    saved_request: Callable[[Body], None]
    saved_answer: Callable[[Body], tuple[Body, str | None]]
    generations: Callable[[Body], list[bytes]] = itself
    samples: Callable[[Body], int] = _one
    split: Callable[[Body, Body | None, str], list[Part]] = _whole_exchange
    unfinished: Callable[[Body, Body], str | None] = _finished
    options: Callable[[dict[str, Any]], tuple[int, bool]] = _no_options
    carries_usage: Callable[[list[str]], bool] = _no_usage
    chained: bool = False
    previous_id: Callable[[dict[str, Any]], str | None] = _no_previous
    previous_of: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    batched: bool = False
    whole: bool = False
    """One saved body answers a request, whole: no `choices`, no `n` (Responses,
    Messages); else a body of choices (chat, completions)."""
    error_body: Callable[[ReplayServerError], dict[str, Any]] = _openai_error
    client_line: str | None = None
    """A one-line openai-python call that prints the answer to the JSON body in argv[1]
    (the start-up snippet), if the family has one."""
    headers: tuple[str, ...] = ()
    """The request headers (lower case) that are request fields of its table (Anthropic's
    `anthropic-beta`): `with_headers` puts them in the request, the replay's and the
    recorder's alike."""
    error_schema: tuple[str, dict[str, Any]] | None = None
    """The JSON Schema of `error_body`'s envelope, and its name in the OpenAPI document
    (None: the OpenAI envelope's)."""
    id_header: bytes | None = None
    """The response header that carries a request id (`request-id`), if the API sends one."""
    credential: Callable[[str], tuple[str, str]] = _bearer
    """The header (lower case) and value that carry an API key to a server of the API
    (OpenAI's `Authorization: Bearer KEY`; Anthropic's `x-api-key: KEY`): how the judge
    path sends --upstream-api-key."""
    client_variable: str = "OPENAI_BASE_URL"
    """The environment variable the API's own SDK reads its server from (Anthropic's:
    `ANTHROPIC_BASE_URL`), which `record` tells the user to set."""
    models: Callable[[list[tuple[str, int | None]], int], Body] = models_body
    """The API's list of models (`GET /v1/models`), from `(name, max_model_len)` and the
    time the server started: vLLM's unless the API has its own (Anthropic's)."""
    claims: Callable[[Iterable[tuple[bytes, bytes]]], bool] = _claims_none
    """Whether a request on no endpoint of the family is the API's, by its headers
    (Anthropic's `anthropic-version`): whose error envelope and model list it gets
    (`families.family_for`)."""
    counts_tokens: bool = False
    """A count of tokens, no generation (count_tokens): a request whose prompt was not
    saved is an unanswered tokenizer call (reported, failing `run` only under --strict),
    not a miss."""
    route: Callable[[str, str], dict[str, Any] | None] = _no_route
    """For an endpoint with parameters in its path (Gemini's `models/{model}:
    generateContent`, whose `path` is the template saved records name): the request
    fields a request's concrete path and query string carry (its model, whether it
    streams, its framing), or None for a path that is not the endpoint's
    (`fields_of`)."""
    addressed: Callable[[str, str], bool] = _addressed_none
    """Whether a request on no endpoint is the API's by its path and query string (any
    path under Google's `/v1beta/`, `/v1/models?key=...`): whose error envelope and model
    list it gets, before `claims` asks its headers (`families.family_for`)."""
    framed: Callable[[dict[str, Any], bytes], tuple[bytes, bytes]] = _sse
    """A whole stream, as the request (its fields) asks it framed, and its content type:
    server-sent events unless the API frames a stream otherwise (Gemini's JSON array
    without `alt=sse`)."""
    difference: Callable[[dict[str, Any], dict[str, Any]], Difference] = first_difference
    """Where a keyed prompt first differs from a saved one (what a miss says)."""
    model: Callable[[str, int | None], Body] | None = None
    """One model by its name, as the API's `GET .../models/{model}` answers (from its name
    and `max_model_len`), if the API has that route (Google's)."""
    probe: tuple[str, str] | None = None
    """(method, path) of a request that a server of the API answers with anything but 404
    or 405 (`record` asks it which APIs an upstream serves); None: a POST of `{}` to
    `path`."""

    def fields_of(self, path: str, query: str = "") -> dict[str, Any] | None:
        """The request fields a request's path and query carry when it goes to the
        family's endpoint (none at its exact `path`; a path with parameters: `route`), or
        None when it does not."""
        return {} if path == self.path else self.route(path, query)

    def with_headers(self, data: dict[str, Any], headers: Iterable[tuple[bytes, bytes]]
                     ) -> dict[str, Any]:
        """`data` with the family's header fields (`headers`) the request carries, as its
        table reads them: one header's value, or the list of several of one name."""
        if not self.headers:
            return data
        found: dict[str, list[str]] = {}
        for name, value in headers:
            text = name.decode("latin-1").lower()
            if text in self.headers:
                found.setdefault(text, []).append(value.decode("latin-1"))
        if not found:
            return data
        return {**data, **{k: v[0] if len(v) == 1 else v for k, v in found.items()}}

    def parse(self, body: bytes, headers: Iterable[tuple[bytes, bytes]] = (),
              fields: dict[str, Any] | None = None) -> ReplayRequest:
        """A checked replay request from raw body bytes (and the request's headers, for a
        family whose headers are fields; and the fields its path carries, `fields_of`,
        which win over the body's), or BadRequest naming the field."""
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            if not body.strip():
                raise BadRequest("the request body is empty: send a JSON object") from None
            raise BadRequest(f"the request body is not valid JSON: {e}") from None
        if data.__class__ is not dict:
            raise BadRequest(f"the request body must be a JSON object, got {type_name(data)}")
        data = self.with_headers(data, headers)
        if fields:
            data = {**data, **fields}
        self.table.check(data)
        self.check(data)
        n, include_usage = self.options(data)
        request = ReplayRequest(self, data.get("model"), n, data.get("stream") is True,
                                include_usage, [], [], data)
        if not self.chained:  # (a chained family's is keyed once the model is known)
            request.key(None)
        return request

    def stream_problem(self, frames: bytes, body: Body) -> str | None:
        """Why a recorded stream's frames cannot be served for its saved body, or None:
        they must aggregate to it exactly (in the family's normal form), or a streamed
        replay would send another answer than a plain one (a body edited by hand, its
        frames left as they were). Checked when the record is loaded."""
        try:
            got = self.aggregate(frames)
            if not self.whole:
                got, _ = self.saved_answer(got)
        except StreamError as e:
            return f"the saved stream cannot be read: {e}"
        except BadAnswer as e:  # (named as a bad part of a saved file is)
            return f"the saved stream cannot be read: (stream): {e}"
        if got != body:
            return ("the saved stream does not aggregate to the saved `response`: a "
                    "streamed replay would send another answer than a plain one")
        return None

    def example_request(self, prompt: dict[str, Any]) -> dict[str, Any]:
        """A request body that a keyed prompt is the key of (the start-up snippet)."""
        return {k: unverbatim(v) for k, v in prompt.items() if k in self.table.by_name}


@dataclass(slots=True)
class ReplayRequest:
    """A checked request of one family: what selects the saved run (`model`) and samples
    (`n`), how the answer goes out (`stream`, `include_usage`), its keyed prompts and
    their keys (one each, or one per prompt of a batch), and the request as sent."""

    family: Family
    model: str | None
    n: int
    stream: bool
    include_usage: bool
    prompts: list[dict[str, Any]]
    keys: list[bytes]
    data: dict[str, Any]

    @property
    def endpoint(self) -> str:
        return self.family.path

    def key(self, previous: dict[str, Any] | None) -> None:
        """Set the keyed prompts and their keys (a chained family's once `previous`, what
        its earlier turn holds, is known: `Family.previous_of`)."""
        try:
            prompts = self.family.prompts(self.data, previous)
            assert prompts is not None, "the family's check passes only prompts of a form"
            self.keys = [key_of(p) for p in prompts]
        except Unkeyable as e:
            raise self.family.table.too_deep(e) from None
        self.prompts = prompts

    def params(self) -> bytes:
        """The sampling parameters, canonical (only strict mode needs them)."""
        try:
            return self.family.table.params(self.data)
        except Unkeyable as e:
            raise self.family.table.too_deep(e) from None
