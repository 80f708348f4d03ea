"""JSON value types by name, in one table: the classes orjson parses each to, and the words
messages name them with ("an integer", "a list"). A request field's accepted types
(`keys.Field.types`) and a saved record's checks (`saved.record`) both say types with it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CLASSES: dict[str, tuple[type, ...]] = {
    "null": (type(None),), "boolean": (bool,), "integer": (int,), "number": (int, float),
    "string": (str,), "array": (list,), "object": (dict,)}
WORDS = {"null": "null", "boolean": "a boolean", "integer": "an integer",
         "number": "a number", "string": "a string", "array": "a list",
         "object": "an object"}
PLURALS = {"boolean": "booleans", "integer": "integers", "number": "numbers",
           "string": "strings", "array": "lists", "object": "objects"}
# The JSON type of each class orjson makes (a bool is not an integer here).
_NAMES = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string",
          list: "array", dict: "object"}


def type_name(value: Any) -> str:
    """What a message calls the type of `value`: "null", "an integer", "a list", ...; a
    class JSON does not have is named by its Python name."""
    name = _NAMES.get(type(value))
    return WORDS[name] if name is not None else type(value).__name__


def expected(types: Iterable[str], items: str | None = None) -> str:
    """What a message says is expected: the JSON types' words joined with "or" (an array
    of `items`: "a list of strings")."""
    return " or ".join(f"a list of {PLURALS[items]}" if t == "array" and items else WORDS[t]
                       for t in types)


def class_words(kind: type | tuple[type, ...]) -> str:
    """`expected` for Python classes (a saved record's checks name classes)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(WORDS[_NAMES[k]] if k in _NAMES else k.__name__ for k in kinds)
