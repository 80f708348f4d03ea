"""The error tree, and the one place that renders the OpenAI error envelope.

    ReplayServerError            anything the server answers with an error
    ├── BadRequest               400, names the field (`param`) and the reason
    ├── Unauthorized             401
    ├── NotFound                 404, unknown route
    │   └── ModelNotFound        404, like vLLM: "The model `X` does not exist."
    ├── MethodNotAllowed         405
    ├── PayloadTooLarge          413
    ├── BadGateway               502, the recorder's upstream cannot be reached
    └── ReplayError              422, a replay decision; `code` says which
        ├── NoMatch              replay_no_match
        ├── Unusable             replay_unusable
        ├── Ambiguous            replay_ambiguous
        ├── NMismatch            replay_n_mismatch
        ├── Exhausted            replay_exhausted
        └── ParamsMismatch       replay_params_mismatch (strict mode)

    LoadError                    a saved file cannot be read: FILE:LINE, field, reason

Every error body is `{"error": {"message", "type", "param", "code"}}` and carries
`x-should-retry: false`. A replay decision is never 408, 409, 429 or 5xx: openai-python and
inspect_ai retry those, and a retried miss only hides the miss.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

NO_RETRY_HEADER = (b"x-should-retry", b"false")

# inspect_ai turns some 400/422 answers into a model output instead of an error when their
# message holds one of these phrases (see reference/openai-api-and-clients.md). A replay
# error quoting a prompt that happens to contain one must not be scored as an answer, so
# the phrase is broken with a no-break space wherever it appears.
_MAGIC_PHRASES = re.compile(
    r"(maximum)( )(context)( )(length)|(input)( )(length)|(max_tokens)( )(must)",
    re.IGNORECASE,
)


def _defuse(message: str) -> str:
    return _MAGIC_PHRASES.sub(lambda m: m.group(0).replace(" ", "\u00a0"), message)


class ReplayServerError(Exception):
    status: int = 500
    type: str = "InternalServerError"
    code: str | int | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.detail: dict[str, Any] = {}

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict[str, Any]:
        code = self.code if self.code is not None else self.status
        return {
            "error": {
                "message": _defuse(self.message),
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


class ReplayError(ReplayServerError):
    """A replay decision: the request was well formed but cannot be answered faithfully."""

    status = 422
    type = "ReplayError"
    code = "replay_error"


class NoMatch(ReplayError):
    code = "replay_no_match"


class Unusable(ReplayError):
    code = "replay_unusable"


class Ambiguous(ReplayError):
    code = "replay_ambiguous"


class NMismatch(ReplayError):
    code = "replay_n_mismatch"


class Exhausted(ReplayError):
    code = "replay_exhausted"


class ParamsMismatch(ReplayError):
    code = "replay_params_mismatch"


def render(error: ReplayServerError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, headers and body of an error response: the single renderer."""
    body = orjson.dumps(error.body())
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        NO_RETRY_HEADER,
    ]
    return error.status, headers, body


class LoadError(Exception):
    """A saved file that cannot be read as its format says. Names the file, line and field."""

    def __init__(self, file: str, line: int | None, reason: str, field: str | None = None):
        self.file = file
        self.line = line
        self.reason = reason
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        what = f"field `{self.field}`: " if self.field else ""
        return f"{where}: {what}{self.reason}"
