"""Where a Gemini prompt first differs from the nearest saved one (what a miss says): its
`contents` as a conversation (content index, role, and the character where a content's
one text part first differs), then its other key fields. Never quoted in the error."""

from __future__ import annotations

from typing import Any

from ..difference import Difference, messages_difference, rest_difference


def _message(content: Any) -> Any:
    """A content as a message: its one text part (a plain `{"text"}`) as its text, any
    other parts as they are."""
    if not isinstance(content, dict):
        return content
    parts = content.get("parts")
    text: Any = parts
    if isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0], dict) \
            and parts[0].keys() == {"text"} and isinstance(parts[0]["text"], str):
        text = parts[0]["text"]
    return {**{k: v for k, v in content.items() if k != "parts"}, "content": text}


def difference(asked: dict[str, Any], saved: dict[str, Any]) -> Difference:
    """Where the keyed prompt `asked` first differs from `saved`."""
    a, s = asked.get("contents"), saved.get("contents")
    if isinstance(a, list) and isinstance(s, list):
        found = messages_difference([_message(c) for c in a], [_message(c) for c in s],
                                    "content")
        if found is not None:
            return found
    return rest_difference(asked, saved)
