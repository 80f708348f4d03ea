"""The registry of API families: endpoint path -> `Family`. Adding an API is adding its
package (`wire/<name>/`, of the families' one shape, its `FAMILY` naming its path in
`paths.py`; a second path of the same API, its `ALSO`) and its name here."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib import import_module
from typing import Any

from ..errors import ReplayServerError
from ..paths import CHAT_PATH, ENDPOINTS, MESSAGES_PATH
from .family import Family
from .keys import markdown_table

_PACKAGES = (
    "chat",
    "completions",
    "responses",
    "messages",
)


def _load() -> dict[str, Family]:
    found: dict[str, Family] = {}
    for name in _PACKAGES:
        module = import_module(f"{__package__}.{name}")
        # (a package may answer a second path of its API: Messages' count_tokens)
        for family in (module.FAMILY, *getattr(module, "ALSO", ())):
            assert isinstance(family, Family) and family.path not in found
            found[family.path] = family
    assert tuple(found) == ENDPOINTS, "paths.ENDPOINTS names the families, in this order"
    return found


FAMILIES: dict[str, Family] = _load()
BY_KIND: dict[str, Family] = {f.kind: f for f in FAMILIES.values()}


def family_of(endpoint: str) -> Family:
    """The family that answers an endpoint path (KeyError for any other path)."""
    return FAMILIES[endpoint]


def fields_table(*paths: str) -> str:
    """The table of these families' request fields (docs/reference/fields.md, generated)."""
    return markdown_table((FAMILIES[p].name, FAMILIES[p].table) for p in paths)


def is_anthropic(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether a request is Anthropic's: it carries `anthropic-version`, as Anthropic's SDK
    and every client of its API send. It tells the two APIs apart on the paths they share
    (`GET /v1/models`) and on errors for no endpoint's request (an unknown route)."""
    return any(name == b"anthropic-version" for name, _ in headers)


def family_for(path: str, headers: Iterable[tuple[bytes, bytes]]) -> Family:
    """The family of any request: its endpoint's; on any other path, Messages for an
    Anthropic request (`is_anthropic`), else chat (OpenAI's)."""
    family = FAMILIES.get(path)
    if family is not None:
        return family
    return FAMILIES[MESSAGES_PATH if is_anthropic(headers) else CHAT_PATH]


def error_body_of(path: str, headers: Iterable[tuple[bytes, bytes]]
                  ) -> Callable[[ReplayServerError], dict[str, Any]]:
    """The error envelope of any request: its family's (`family_for`; a wrong method on an
    endpoint too)."""
    return family_for(path, headers).error_body
