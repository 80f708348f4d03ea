"""What every family's saved answers are checked and told apart with: the error that names
what is wrong with a saved body (`BadAnswer`), the checks of a field's JSON type they
share, and what makes two saved generations the same one (`generation_id`).

Each family says what a usable saved exchange of its API is (its `answer.py`, behind
`Family.saved_request`, `Family.saved_answer` and `Family.generations`); a saved record is
checked with them when its file is read (`saved.record.make_record`), which adds the
file, the line and where in the record the body lies. Nothing here knows of files.

Each check tests the exact JSON type first (what orjson gives, so the usual line costs a
type comparison a field) and only then works out what is wrong, so that the error costs
nothing until a line is bad.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .json_types import class_words, type_name
from .keys import canonical

MISSING: Any = object()  # stands for a field that is not there at all (null is there)


class BadAnswer(Exception):
    """A saved body (or request) of the wrong shape: `field`, its place in the body
    (`choices[0].message`), and why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"field `{field}`: {reason}")
        self.field = field
        self.reason = reason


def want(name: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    """`value` if it has the type `kind` (a subclass too; a boolean is no integer); else
    the BadAnswer that says so. MISSING is a field that is not there."""
    if value is MISSING:
        raise BadAnswer(name, "missing")
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadAnswer(name, f"expected {class_words(kind)}, got {type_name(value)}")
    return value


def typed_list(body: dict[str, Any], name: str, what: str) -> list[Any]:
    """`body[name]`, checked to be a list of objects (`what`) each with a string `type`: a
    Responses body's `output` items, a Messages body's `content` blocks."""
    value = body.get(name, MISSING)
    items: list[Any] = value if type(value) is list else want(name, value, list)
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise BadAnswer(f"{name}[{i}]", f"expected {what} with a string `type`")
    return items


def generation_id(same: Any) -> bytes:
    """The identity of a saved generation, from what makes it the same one (each family
    says what that is: `Family.generations`)."""
    return hashlib.blake2b(canonical({"s": same}), digest_size=8).digest()


def itself(body: dict[str, Any]) -> list[bytes]:
    """A saved body that is one generation, all of it (a count_tokens answer)."""
    return [generation_id(body)]
