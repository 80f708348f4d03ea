"""The error tree, and the one place that renders the OpenAI error envelope.

    ReplayServerError            anything the server answers with an error
    ├── BadRequest               400, names the field (`param`) and the reason
    ├── Unauthorized             401
    ├── NotFound                 404, unknown route
    │   ├── ModelNotFound        404, like vLLM: "The model `X` does not exist."
    │   └── TokenizerUnanswered  404, tokenizer_unanswered: neither recorded nor computable
    ├── MethodNotAllowed         405
    ├── PayloadTooLarge          413
    ├── BadGateway               502, the recorder's upstream cannot be reached
    ├── StoreUnavailable         503, the shared state (`--state`) cannot be reached
    └── ReplayError              400, a replay decision; `code` says which
        ├── NoMatch              replay_no_match
        ├── Unusable             replay_unusable
        │   └── IndexDamaged     replay_unusable: the index file cannot be read there
        ├── Ambiguous            replay_ambiguous
        ├── NMismatch            replay_n_mismatch
        ├── Exhausted            replay_exhausted
        └── ParamsMismatch       replay_params_mismatch (strict mode)

    LoadError                    a saved file cannot be read: FILE:LINE, field, reason

Every error body is `{"error": {"message", "type", "param", "code"}}` (or the envelope of
the request's API family) and carries `x-should-retry: false`, but for the one error a
retry can cure (`retryable`: the recorder's 502 for an upstream it could not reach). A
replay decision is never 408, 409, 429 or 5xx: openai-python and
inspect_ai retry those, and a retried miss only hides the miss. It is 400, as OpenAI and
vLLM answer an invalid request: litellm treats 422 as "unsupported parameter" (with
`drop_params` it drops parameters, resends, and returns None).

Some harnesses turn an error into a scored model answer when its message holds certain
phrases (inspect_ai: "maximum context length", "input length", "max_tokens must be at
least", and "blocked" under type invalid_request_error; evalscope: "context window",
"maximum context length", "input length", "too many tokens"). Replay errors never quote
prompt text, and every message is defused: such a phrase, wherever it comes from (a file
name, a model name), is broken with an invisible word joiner.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

NO_RETRY_HEADER = (b"x-should-retry", b"false")

# The phrases that make a harness score an error as an answer (see the module docstring;
# inspect_ai's litellm-proxy markers too: `_providers/_litellm_proxy_errors.py`).
TRIGGER_PHRASES = ("maximum context length", "context window", "input length",
                   "too many tokens", "max_tokens must be at least", "blocked",
                   "context_length_exceeded", "content_filter", "content_policy_violation",
                   "invalid_prompt", "prompt is too long", "input is too long",
                   "input too large", "input_too_large", "exceeds the maximum number of tokens",
                   "exceeded model token limit", "contextwindowexceedederror",
                   "contentpolicyviolationerror", "safety_check",
                   "can't help with that request")
_TRIGGERS = re.compile("|".join("[ _]".join(re.escape(w) for w in re.split("[ _]", p))
                                for p in TRIGGER_PHRASES), re.IGNORECASE)


_PLAIN = tuple(p.replace("_", " ") for p in TRIGGER_PHRASES)


def _defuse(message: str) -> str:
    """The message with every trigger phrase broken by an invisible word joiner after its
    first character: it reads the same, but matches no harness's pattern. (Substring tests
    first: the regular expression is slow, and most messages hold no such phrase.)"""
    plain = message.lower().replace("_", " ")
    if not any(p in plain for p in _PLAIN):
        return message
    return _TRIGGERS.sub(lambda m: m.group(0)[0] + "\u2060" + m.group(0)[1:], message)


class ReplayServerError(Exception):
    status: int = 500
    type: str = "InternalServerError"
    code: str | int | None = None
    retryable: bool = False  # (True: sent without `x-should-retry: false`)

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.detail: dict[str, Any] = {}

    def __str__(self) -> str:
        return self.message

    def shown(self) -> str:
        """The message as every envelope shows it: defused (see the module docstring)."""
        return _defuse(self.message)

    def body(self) -> dict[str, Any]:
        """The OpenAI envelope (an API family with its own envelope renders `shown()` in
        it: `wire.family.Family.error_body`)."""
        code = self.code if self.code is not None else self.status
        return {
            "error": {
                "message": self.shown(),
                "type": self.type,
                "param": self.param,
                "code": code,
            }
        }


class BadRequest(ReplayServerError):
    status = 400
    type = "BadRequestError"


class Unauthorized(ReplayServerError):
    status = 401
    type = "AuthenticationError"


class NotFound(ReplayServerError):
    status = 404
    type = "NotFoundError"


class ModelNotFound(NotFound):
    def __init__(self, model: str, served: list[str]) -> None:
        names = ", ".join(served) if served else "(none)"
        super().__init__(
            f"The model `{model}` does not exist. Served models: {names}. "
            "Ask for one of these, or map the name with --model-alias CLIENT=SAVED.",
            param="model",
        )


class TokenizerUnanswered(NotFound):
    """A tokenizer call (`/tokenize`, `/detokenize`, `/tokenizer_info`) that neither a
    recorded exchange nor `--tokenizer` can answer faithfully. 404, as a server without
    the endpoint answers: harnesses that probe it (lm-eval) then fall back, and those that
    tolerate a failure (olmo-eval) estimate. It never stands for a generation."""

    code = "tokenizer_unanswered"


class MethodNotAllowed(ReplayServerError):
    status = 405
    type = "MethodNotAllowed"


class PayloadTooLarge(ReplayServerError):
    status = 413
    type = "PayloadTooLarge"


class BadGateway(ReplayServerError):
    """Only the recorder sends it, and without `x-should-retry: false`: retrying an
    upstream that could not be reached can succeed."""

    status = 502
    type = "BadGatewayError"
    retryable = True


class StoreUnavailable(ReplayServerError):
    """The shared state (`--state`: Redis or Valkey) cannot be reached, or timed out, for a
    request that needs it: never answered without it (a sample could be served twice, a
    count lost). 503 with `x-should-retry: false`: a client's retry would not know whether
    the store is back, and `run` fails on it (the request is counted)."""

    status = 503
    type = "ServiceUnavailableError"
    code = "replay_state_unavailable"
    kept = False  # (True: the event of the request that met it is kept, to send later)


class ReplayError(ReplayServerError):
    """A replay decision: the request was well formed but cannot be answered faithfully."""

    status = 400
    type = "ReplayError"
    code = "replay_error"


class NoMatch(ReplayError):
    code = "replay_no_match"


class Unusable(ReplayError):
    code = "replay_unusable"


class IndexDamaged(Unusable):
    """The index file is damaged where a request needs it (a page SQLite cannot read, a
    value whose checksum fails): that request cannot be answered faithfully, the rest
    can. A replay decision (400, counted, `run` fails on it), never a 5xx: a retry meets
    the same bytes. Its code is `replay_unusable`'s: what the request needs is saved
    (or may be) but cannot be served."""


class Ambiguous(ReplayError):
    code = "replay_ambiguous"


class NMismatch(ReplayError):
    code = "replay_n_mismatch"


class Exhausted(ReplayError):
    code = "replay_exhausted"


class ParamsMismatch(ReplayError):
    code = "replay_params_mismatch"


# Every replay decision's code, in the order reports show them.
REPLAY_CODES: tuple[str, ...] = tuple(
    str(kind.code) for kind in (NoMatch, Unusable, Ambiguous, NMismatch, Exhausted,
                                ParamsMismatch))


def render(error: ReplayServerError,
           envelope: Callable[[ReplayServerError], dict[str, Any]] | None = None
           ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, headers and body of an error response: the single renderer. `envelope` is
    an API family's own error body (`wire.family.Family.error_body`); the OpenAI one by
    default."""
    body = orjson.dumps(envelope(error) if envelope is not None else error.body())
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    return error.status, headers if error.retryable else [*headers, NO_RETRY_HEADER], body


# Saved files shown by another name than their local path: an object fetched from object
# storage is read from the local cache (`saved/objects.py`), and named by its URL. Empty
# until a command fetches one.
_SHOWN: dict[str, str] = {}


def show_as(local: str, name: str) -> None:
    """Name the local file or folder `local`, and everything under it, `name` wherever a
    saved file is named: a URL's cached copy is an implementation detail, the URL is what
    the user gave and can look at."""
    _SHOWN[local] = name


def shown_file(file: str) -> str:
    """A saved file's name as every error, record and report gives it: the path it was
    read by, or the URL it was fetched from. LoadError and `saved.record.make_record` ask
    here, the two places a file's name enters an error or a record."""
    for local, name in _SHOWN.items():
        if file.startswith(local) and file[len(local):len(local) + 1] in ("", "/"):
            return name + file[len(local):]
    return file


def where_of(file: object, line: object = None, instance: object = None) -> str:
    """`FILE:LINE` (`FILE` when there is no line), plus ` (INSTANCE)` when known: the one
    way every message, report and header names a place in a saved file."""
    where = f"{file}:{line}" if line is not None else str(file)
    return f"{where} ({instance})" if instance is not None else where


class LoadError(Exception):
    """A saved file that cannot be read as its format says: `FILE:LINE: field `F`: reason`.
    Every reader raises it for a bad line, so that the user always learns where, which field
    and why, and `--skip-bad-lines` can count it instead. `place` names the bad part of a
    file that has no lines (an inspect_ai sample's model call, a zip member)."""

    def __init__(self, file: str, line: int | None, reason: str, field: str | None = None,
                 place: str | None = None):
        self.file = shown_file(file)
        self.line = line
        self.reason = reason
        self.field = field
        self.place = place
        super().__init__(str(self))

    def __str__(self) -> str:
        what = f"field `{self.field}`: " if self.field else ""
        return f"{where_of(self.file, self.line, self.place)}: {what}{self.reason}"
