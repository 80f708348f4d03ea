"""Anthropic's error envelope: `{"type": "error", "error": {"type", "message"}}`, the
error type by status as the API names them. A replay decision's code (`replay_no_match`,
...) opens its message, since the envelope has no field for it."""

from __future__ import annotations

from typing import Any

from ...errors import ReplayError, ReplayServerError

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
         429: "rate_limit_error", 529: "overloaded_error"}


SCHEMA = ("AnthropicError", {
    "type": "object", "required": ["type", "error"], "description": "Anthropic's error "
    "envelope (sent with the header `x-should-retry: false`); a replay decision's code "
    "opens the message",
    "properties": {"type": {"const": "error"}, "error": {
        "type": "object", "required": ["type", "message"],
        "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}},
})


def error_body(error: ReplayServerError) -> dict[str, Any]:
    message = error.shown()
    if isinstance(error, ReplayError):
        message = f"{error.code}: {message}"
    return {"type": "error", "error": {"type": TYPES.get(error.status, "api_error"),
                                       "message": message}}
