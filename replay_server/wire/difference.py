"""Where a request first differs from the nearest saved prompt: what a miss reports.

The first difference is structured (`Difference`): where it is (message index and role,
character offset), what kind it is, and short excerpts of both sides. Error messages that
reach harnesses say only where and what kind; the excerpts quote prompt text, which some
harnesses pattern-match in error messages, so they go to `/replay/misses`, the log and the
`run` report only. Pure functions of two keyed prompts (`Family.prompts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

EXCERPT = 24
# A word longer than this (in characters, or bytes) is no word a template drifts by: a
# word more or less is looked for only within it, so that a miss inside a long run of
# letters costs no walk over the whole prompt.
WORD = 256


def common_prefix(a: bytes | str, b: bytes | str) -> int:
    """The length of the longest common prefix of `a` and `b`."""
    n = min(len(a), len(b))
    low, high = 0, n  # the common prefix length, by bisection on slices (C comparisons)
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low



def _excerpt(text: str, at: int) -> str:
    start = max(0, at - EXCERPT)
    piece = text[start:at + EXCERPT]
    return ("…" if start else "") + orjson.dumps(piece).decode()[1:-1] + (
        "…" if at + EXCERPT < len(text) else "")


@dataclass(frozen=True)
class Difference:
    """Where a request first differs from the nearest saved prompt.

    `place` names the part (`message 1 (user)`, `the prompt`, `field tools`); `kind` says
    how it differs, in words that group well across many misses; `offset` is the
    character (or token) where the text starts to differ; `requested` and `saved` quote a
    little of both sides around it."""

    place: str
    kind: str
    offset: int | None = None
    requested: str | None = None
    saved: str | None = None
    # For grouping: the same place in prompts of different lengths ("the last message").
    group_place: str | None = None

    def describe(self, quote: bool = False) -> str:
        at = f", character {self.offset}" if self.offset is not None else ""
        text = f"{self.place}{at}: {self.kind}"
        if quote and (self.requested is not None or self.saved is not None):
            text += f' (requested "{self.requested}" vs saved "{self.saved}")'
        return text

    def group(self) -> str:
        """What many misses of one systematic difference share (no offset, no text)."""
        return f"{self.group_place or self.place}: {self.kind}"

    def to_json(self) -> dict[str, Any]:
        return {"place": self.place, "kind": self.kind, "offset": self.offset,
                "requested": self.requested, "saved": self.saved, "group": self.group()}


def _text_kind(asked: str, saved: str, at: int) -> str:
    if asked.rstrip() == saved.rstrip():
        return "whitespace differs at the end"
    if asked.lstrip() == saved.lstrip():
        return "whitespace differs at the start"
    if asked.startswith(saved):
        return "the request's text is longer"
    if saved.startswith(asked):
        return "the request's text is shorter"
    if asked.lower() == saved.lower():
        return "letter case differs"
    for longer, shorter, kind in ((asked, saved, "the request has a word more"),
                                  (saved, asked, "the request lacks a word")):
        rest = _without_word(longer, at)
        if rest is None:
            continue
        if rest == shorter:
            return kind
        if rest.lower() == shorter.lower():
            return f"{kind}, and letter case differs"
    return "the text differs"


def _without_word(text: str, at: int) -> str | None:
    """`text` without the word that `at` is in (or starts) and the spaces after it; None
    for a word longer than WORD."""
    start, stop = at, max(0, at - WORD - 1)
    while start > stop and not text[start - 1].isspace():
        start -= 1
    end, stop = at, min(len(text), start + WORD + 1)
    while end < stop and not text[end].isspace():
        end += 1
    if end - start > WORD or start > 0 and not text[start - 1].isspace():
        return None
    while end < len(text) and text[end].isspace():
        end += 1
    return text[:start] + text[end:]


def _text_diff(asked: str, saved: str, place: str, group_place: str | None = None
               ) -> Difference:
    at = common_prefix(asked, saved)
    return Difference(place, _text_kind(asked, saved, at), at, _excerpt(asked, at),
                      _excerpt(saved, at), group_place)


_LEADING = ("system", "developer")


def system_variants(asked: dict[str, Any], near: dict[str, Any]) -> list[dict[str, Any]]:
    """The request with its leading system message as the nearest saved prompt has it
    (added, left out, or replaced): where one of these is saved, it is the same document."""
    a, s = asked.get("messages"), near.get("messages")
    if not (isinstance(a, list) and isinstance(s, list) and a and s):
        return []

    def lead(messages: list[Any]) -> Any:
        first = messages[0]
        return first if isinstance(first, dict) and first.get("role") in _LEADING else None

    mine, theirs = lead(a), lead(s)
    if mine == theirs:
        return []
    if mine is None:
        variant = [theirs, *a]
    elif theirs is None:
        variant = a[1:]
    else:
        variant = [theirs, *a[1:]]
    return [{**asked, "messages": variant}] if variant else []


def first_difference(asked: dict[str, Any], saved: dict[str, Any]) -> Difference:
    """Where `asked` first differs from `saved` (keyed prompts: `Family.prompts`)."""
    if "input" in asked and "input" in saved:
        if asked.get("previous") != saved.get("previous"):
            return _previous_diff(asked.get("previous"), saved.get("previous"))
        a, s = asked["input"], saved["input"]
        if isinstance(a, list) and isinstance(s, list):
            found = messages_difference(a, s, "input item")
            if found is not None:
                return found
        elif a != s:
            return Difference("the input", "differs in structure")
        return rest_difference(asked, saved)
    if "messages" in asked and "messages" in saved:
        return messages_difference(asked["messages"], saved["messages"]) \
            or rest_difference(asked, saved)
    if "prompt" in asked and "prompt" in saved:
        a, s = asked["prompt"], saved["prompt"]
        if isinstance(a, str) and isinstance(s, str):
            if a != s:
                return _text_diff(a, s, "the prompt")
        elif isinstance(a, list) and isinstance(s, list):
            if a != s:
                at = _common_list(a, s)
                return Difference("the prompt's token ids", f"{len(a)} vs {len(s)} tokens, "
                                  f"token {at} differs", None, str(a[at:at + 5]),
                                  str(s[at:at + 5]))
        else:
            return Difference("the prompt", "the request sends it as " + (
                "a string" if isinstance(a, str) else "token ids") + ", the saved run as " + (
                "a string" if isinstance(s, str) else "token ids"))
        return rest_difference(asked, saved)
    return Difference("the endpoint", "the saved prompt is for another endpoint")


def _common_list(a: list[Any], b: list[Any]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _previous_diff(asked: Any, saved: Any) -> Difference:
    """Where the conversations before two Responses requests (`previous_response_id`)
    first differ."""
    place = "the conversation before the input (previous_response_id)"
    if not isinstance(asked, dict) or not isinstance(saved, dict):
        return Difference(place, "the request continues an earlier response, the saved "
                          "prompt does not" if saved is None else "the saved prompt "
                          "continues an earlier response, the request does not"
                          if asked is None else "it differs")
    if not isinstance(asked.get("request"), dict) or not isinstance(saved.get("request"), dict):
        return Difference(place, "it differs")
    if asked["request"] != saved["request"]:
        inner = first_difference(asked["request"], saved["request"])
    else:
        a, s = asked.get("output"), saved.get("output")
        found = messages_difference(a, s, "output item") if isinstance(a, list) and isinstance(
            s, list) else None
        inner = found or Difference("the output", "differs")
    return Difference(f"the earlier turn's {inner.place}", inner.kind, inner.offset,
                      inner.requested, inner.saved)


def _role(message: Any) -> str:
    if not isinstance(message, dict):
        return "?"
    return str(message.get("role") or message.get("type"))


def messages_difference(asked: list[Any], saved: list[Any], noun: str = "message"
                        ) -> Difference | None:
    """Where two conversations (lists of messages, each a `role` and a `content`: a text,
    or anything else compared whole) first differ, or None where they do not."""
    for i, (a, s) in enumerate(zip(asked, saved, strict=False)):
        if a == s:
            continue
        if not (isinstance(a, dict) and isinstance(s, dict)):
            return Difference(f"{noun} {i}", f"the {noun} differs in structure")
        place = f"{noun} {i} ({_role(s)})"
        # the same place in every prompt, however many messages came before it
        group = f"the last {noun} ({_role(s)})" if i == len(saved) - 1 else None
        if a.get("role") != s.get("role"):
            if len(asked) < len(saved) and asked[i:] == saved[i + 1:]:
                return Difference(place, "missing in the request")
            if len(asked) > len(saved) and asked[i + 1:] == saved[i:]:
                return Difference(f"{noun} {i} ({_role(a)})", "not in the saved prompt")
            return Difference(f"{noun} {i}", f"role {_role(a)!r} in the request, "
                              f"{_role(s)!r} saved", group_place=group and f"the last {noun}")
        ac, sc = a.get("content"), s.get("content")
        if ac != sc:
            if isinstance(ac, str) and isinstance(sc, str):
                return _text_diff(ac, sc, place, group)
            return Difference(place, "the content differs in structure", group_place=group)
        fields = sorted(k for k in a.keys() | s.keys() if a.get(k) != s.get(k))
        return Difference(place, f"field(s) {', '.join(fields)} differ", group_place=group)
    if len(asked) < len(saved):
        return Difference(f"{noun} {len(asked)} ({_role(saved[len(asked)])})",
                          "missing at the end of the request")
    if len(asked) > len(saved):
        return Difference(f"{noun} {len(saved)} ({_role(asked[len(saved)])})",
                          f"not in the saved prompt (the request has more {noun}s)")
    return None


def rest_difference(asked: dict[str, Any], saved: dict[str, Any]) -> Difference:
    """Which fields of two keyed prompts, but their prompts, differ."""
    fields = sorted(k for k in asked.keys() | saved.keys()
                    if k not in ("messages", "prompt", "input", "previous")
                    and asked.get(k) != saved.get(k))
    if not fields:
        return Difference("the prompt", "no difference found")
    only_asked = [f for f in fields if f not in saved]
    only_saved = [f for f in fields if f not in asked]
    if only_asked and not only_saved and len(fields) == len(only_asked):
        return Difference(f"field {', '.join(fields)}", "set in the request, not saved")
    if only_saved and not only_asked and len(fields) == len(only_saved):
        return Difference(f"field {', '.join(fields)}", "saved, not in the request")
    return Difference(f"field {', '.join(fields)}", "differs")
