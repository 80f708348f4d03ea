"""What chat and completions requests share beyond their fields: `n`, and whether a stream
carries a usage chunk (`stream_options.include_usage`)."""

from __future__ import annotations

from typing import Any

import orjson

from ...errors import BadRequest


def options(data: dict[str, Any]) -> tuple[int, bool]:
    """`n` (1 when not set) and `stream_options.include_usage`, checked."""
    n = 1 if data.get("n") is None else _n(data["n"])
    return n, data.get("stream_options") is not None and _include_usage(data)


def _n(n: Any) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise BadRequest(f"`n` must be an integer >= 1, got {orjson.dumps(n).decode()}",
                         param="n")
    return n


def _include_usage(data: dict[str, Any]) -> bool:
    if data.get("stream") is not True:
        raise BadRequest("`stream_options` can only be set when `stream` is true",
                         param="stream_options")
    include = data["stream_options"].get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise BadRequest("`stream_options.include_usage` must be a boolean",
                         param="stream_options.include_usage")
    return include is True


def n_asked(request: dict[str, Any]) -> int:
    """The choices a request asks for per prompt: `n`, or 1 (a stream's check reads it
    leniently: the request was the upstream's to judge)."""
    n = request.get("n")
    return n if isinstance(n, int) and n > 0 else 1
