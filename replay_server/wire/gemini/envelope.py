"""Google's error envelope: `{"error": {"code", "message", "status"}}`, the status named as
Google's APIs name each HTTP status (`INVALID_ARGUMENT` for 400, `NOT_FOUND` for 404,
`UNAUTHENTICATED` for 401...). A replay decision's code (`replay_no_match`, ...) opens its
message, since the envelope has no field for it."""

from __future__ import annotations

from typing import Any

from ...errors import ReplayError, ReplayServerError

STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            404: "NOT_FOUND", 405: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT",
            429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE",
            503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}

SCHEMA = ("GoogleError", {
    "type": "object", "required": ["error"], "description": "Google's error envelope (sent "
    "with the header `x-should-retry: false`); a replay decision's code opens the message",
    "properties": {"error": {
        "type": "object", "required": ["code", "message", "status"],
        "properties": {"code": {"type": "integer"}, "message": {"type": "string"},
                       "status": {"type": "string"}}}},
})


def error_body(error: ReplayServerError) -> dict[str, Any]:
    message = error.shown()
    if isinstance(error, ReplayError):
        message = f"{error.code}: {message}"
    return {"error": {"code": error.status, "message": message,
                      "status": STATUSES.get(error.status, "UNKNOWN")}}
