"""A Gemini request (generateContent, or countTokens): the checks it must pass beyond the
table's types, its keyed prompt, and how many candidates it asks for."""

from __future__ import annotations

from typing import Any

from ...errors import BadRequest
from .fields import CONFIG, COUNT_TABLE, TABLE, WRAPPED, camel, request_form

FRAMINGS = ("sse", "json")  # `alt`: server-sent events, or one JSON array (the default)


def _spelled_twice(data: dict[str, Any], at: str = "") -> None:
    """BadRequest for a field given in both spellings (`generationConfig` and
    `generation_config`): which one the API would read cannot be told. (A null one is
    unset.)"""
    seen: dict[str, str] = {}
    for name, value in data.items():
        if value is None:
            continue
        other = seen.setdefault(camel(name), name)
        if other != name:
            raise BadRequest(f"`{at}{other}` and `{at}{name}` are the same field: send one",
                             param=at + camel(name))
    for name in (CONFIG, "generation_config"):
        config = data.get(name)
        if isinstance(config, dict):
            _spelled_twice(config, f"{name}.")


def _contents(data: dict[str, Any], where: str) -> None:
    found = data.get("contents")
    if not isinstance(found, list) or not found:
        raise BadRequest(f"`{where}contents` is required: a non-empty list of contents",
                         param="contents")
    for i, content in enumerate(found):
        if not isinstance(content, dict):
            raise BadRequest(f"`{where}contents[{i}]` must be an object", param="contents")
        parts = content.get("parts")
        if parts is not None and not (isinstance(parts, list)
                                      and all(isinstance(p, dict) for p in parts)):
            raise BadRequest(f"`{where}contents[{i}].parts` must be a list of objects",
                             param="contents")


def check(data: dict[str, Any]) -> None:
    """A generateContent request: its conversation, one spelling of each field, a stream
    framing the replay sends (`alt`), and at least one candidate asked for."""
    _spelled_twice(data)
    _contents(data, "")
    alt = data.get("alt")
    if alt is not None and alt not in FRAMINGS:
        raise BadRequest(f"`alt={alt}` is not served: a stream is framed as server-sent "
                         "events (`alt=sse`) or as one JSON array (`alt=json`, the default)",
                         param="alt")
    candidates(data)


def check_count(data: dict[str, Any]) -> None:
    """A countTokens request: `contents`, or a whole request in `generateContentRequest`
    (not both)."""
    _spelled_twice(data)
    wrapped = data.get(WRAPPED)
    if wrapped is not None and "contents" in data:
        raise BadRequest(f"send `contents` or `{WRAPPED}`, not both", param=WRAPPED)
    if isinstance(wrapped, dict):
        _spelled_twice(wrapped, f"{WRAPPED}.")
        _contents(wrapped, f"{WRAPPED}.")
    else:
        _contents(data, "")


def candidates(data: dict[str, Any]) -> int:
    """How many candidates a request asks for (`candidateCount`, 1 by default)."""
    count = request_form(data).get(f"{CONFIG}.candidateCount")
    if count is None:
        return 1
    if count.__class__ is not int or count < 1:
        raise BadRequest(f"`{CONFIG}.candidateCount` must be a positive integer",
                         param=f"{CONFIG}.candidateCount")
    return int(count)


def options(data: dict[str, Any]) -> tuple[int, bool]:
    """`n` (the candidates asked for); a Gemini stream carries its usage always."""
    return candidates(data), False


def prompts(request: dict[str, Any], previous: dict[str, Any] | None = None
            ) -> list[dict[str, Any]] | None:
    """The one keyed prompt: `{"v", "kind": "gemini", "contents", <key fields>}` (None for
    `contents` of no valid form)."""
    found = request.get("contents")
    if not isinstance(found, list):
        return None
    return [TABLE.prompt(request, {"contents": TABLE.normal("contents", found)})]


def count_prompts(request: dict[str, Any], previous: dict[str, Any] | None = None
                  ) -> list[dict[str, Any]] | None:
    """The keyed prompt of a countTokens request (its own kind; `generateContentRequest`
    unwrapped)."""
    found = request_form(request).get("contents")
    if not isinstance(found, list):
        return None
    return [COUNT_TABLE.prompt(request, {"contents": COUNT_TABLE.normal("contents", found)})]
