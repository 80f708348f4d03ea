"""A saved Gemini exchange: its request holds a conversation (`contents`), and its response
is a GenerateContentResponse whose candidates are its samples; a saved countTokens answer
is its `totalTokens`.

A candidate is an answer once it finished (it has a `finishReason`, whatever the reason:
`STOP`, `MAX_TOKENS`, `SAFETY`...; a cut before any text leaves it without parts, and that
is what the API answered); a candidate with neither a `finishReason` nor parts is no
answer. A response without candidates whose prompt was blocked (`promptFeedback`'s
`blockReason`) is one answer, itself. A candidate's `index` is 0 when it is left out (the
API leaves out a field's default); candidates are put in index order.
"""

from __future__ import annotations

from typing import Any

from ..answer import MISSING, BadAnswer, generation_id, want
from ..json_types import type_name
from .fields import WRAPPED
from .request import candidates

CANDIDATES = "candidates"


def saved_request(request: dict[str, Any]) -> None:
    """A saved request (of an answer, or of a count) holds a non-empty list of content
    objects (a count's perhaps in `generateContentRequest`)."""
    wrapped = request.get(WRAPPED)
    found = (wrapped if isinstance(wrapped, dict) else request).get("contents")
    if not (isinstance(found, list) and found and all(isinstance(c, dict) for c in found)):
        raise BadAnswer("contents", "expected a non-empty list of content objects")


def index_of(candidate: dict[str, Any]) -> Any:
    return candidate.get("index", 0)


def _candidates(body: dict[str, Any]) -> list[Any]:
    found = body.get(CANDIDATES, MISSING)
    if found is MISSING:
        return []
    found = list(want(CANDIDATES, found, list))
    for i, candidate in enumerate(found):
        if not isinstance(candidate, dict):
            raise BadAnswer(f"{CANDIDATES}[{i}]", f"expected a candidate object, got "
                            f"{type_name(candidate)}")
        if type(index_of(candidate)) is not int:
            raise BadAnswer(f"{CANDIDATES}[{i}].index", "expected an integer")
        content = candidate.get("content")
        if content is not None:
            want(f"{CANDIDATES}[{i}].content", content, dict)
            parts = content.get("parts")
            if parts is not None and not (isinstance(parts, list)
                                          and all(isinstance(p, dict) for p in parts)):
                raise BadAnswer(f"{CANDIDATES}[{i}].content.parts",
                                "expected a list of part objects")
    if len({index_of(c) for c in found}) != len(found):
        raise BadAnswer(CANDIDATES, "two candidates have the same `index` (a left-out "
                        "index is 0)")
    return found


def saved_answer(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The response with its candidates in index order (itself when they are), checked
    for shape; and why it is not an answer, or None."""
    if "error" in body:
        return body, "the saved answer is an error"
    found = _candidates(body)
    usage = body.get("usageMetadata")
    if usage is not None:
        want("usageMetadata", usage, dict)
    if not found:
        feedback = body.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            return body, None
        return body, "the saved answer has no candidates (and no prompt `blockReason`)"
    ordered = sorted(found, key=index_of)
    if ordered != found:
        body = {**body, CANDIDATES: ordered}
    for candidate in ordered:
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if candidate.get("finishReason") is None and not parts:
            return body, "a saved candidate has no `finishReason` and no parts: unfinished"
    return body, None


def saved_count(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A saved countTokens answer: `totalTokens`, an integer (left out: 0, as the API
    leaves out a default)."""
    total = body.get("totalTokens")
    if total is not None:
        want("totalTokens", total, int)
    return body, None


def samples(body: dict[str, Any]) -> int:
    """One sample per candidate; a blocked prompt's answer (no candidates) is one."""
    return len(body.get(CANDIDATES) or ()) or 1


def generations(body: dict[str, Any]) -> list[bytes]:
    """One generation per candidate: the whole candidate but its index (its parts, thought
    signatures included, since the next turn sends them back; `finishReason`, safety
    ratings and any other field); a blocked prompt's answer, its `promptFeedback`."""
    found = body.get(CANDIDATES)
    if not found:
        return [generation_id({"promptFeedback": body.get("promptFeedback")})]
    return [generation_id({k: v for k, v in c.items() if k != "index"}) for c in found]


def unfinished(request: dict[str, Any], body: dict[str, Any]) -> str | None:
    """Why a stream that ended is not the whole answer: a candidate asked for that did not
    come, or came without its `finishReason` (a Gemini stream has no end marker: it is
    whole when every candidate finished), or None."""
    found = body.get(CANDIDATES) or []
    if not found:
        feedback = body.get("promptFeedback")
        blocked = isinstance(feedback, dict) and feedback.get("blockReason")
        return None if blocked else "the stream ended before any candidate"
    if len(found) < candidates(request):
        return f"the stream ended with {len(found)} of {candidates(request)} candidates"
    if any(c.get("finishReason") is None for c in found):
        return "the stream ended before every candidate's `finishReason`"
    return None
