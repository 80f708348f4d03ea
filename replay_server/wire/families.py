"""The registry of API families: endpoint path -> `Family`. Adding an API is adding its
package (`wire/<name>/`, of the families' one shape, its `FAMILY` naming its path in
`paths.py`) and its name here."""

from __future__ import annotations

from importlib import import_module

from ..paths import ENDPOINTS
from .family import Family
from .keys import markdown_table

_PACKAGES = (
    "chat",
    "completions",
    "responses",
)


def _load() -> dict[str, Family]:
    found: dict[str, Family] = {}
    for name in _PACKAGES:
        family = import_module(f"{__package__}.{name}").FAMILY
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
