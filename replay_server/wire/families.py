"""The registry of API families: endpoint path -> `Family`. Adding an API is adding its
package (`wire/<name>/`, of the families' one shape, its `FAMILY`; a second path of the
same API, its `ALSO`) and its line here: nothing else imports a family's package
(tests/test_layers.py), and every other module asks the `Family`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from ..errors import ReplayServerError
from . import chat, completions, gemini, messages, responses
from .family import Family
from .keys import markdown_table


def _register(*packages: ModuleType) -> dict[str, Family]:
    found: dict[str, Family] = {}
    for package in packages:
        # (a package may answer a second path of its API: Messages' count_tokens)
        for family in (package.FAMILY, *getattr(package, "ALSO", ())):
            assert isinstance(family, Family) and family.path not in found
            found[family.path] = family
    return found


# In this order: the endpoints' (ENDPOINTS, a record's `endpoint` error, the routes); the
# first, OpenAI's chat, answers for a request of no family (`family_for`).
FAMILIES: dict[str, Family] = _register(
    chat,
    completions,
    responses,
    messages,
    gemini,
)
ENDPOINTS = tuple(FAMILIES)
"""The replay endpoints: their answers are saved generations."""
BY_KIND: dict[str, Family] = {f.kind: f for f in FAMILIES.values()}


def family_of(endpoint: str) -> Family:
    """The family that answers an endpoint path (KeyError for any other path)."""
    return FAMILIES[endpoint]


def fields_table(*paths: str) -> str:
    """The table of these families' request fields (docs/reference/fields.md, generated)."""
    return markdown_table((FAMILIES[p].name, FAMILIES[p].table) for p in paths)


def endpoint_for(path: str, query: str = "") -> tuple[Family, dict[str, Any]] | None:
    """The family whose endpoint a request goes to, and the request fields its path and
    query string carry (`Family.fields_of`: none at an exact endpoint path; Gemini's
    `models/{model}:streamGenerateContent?alt=sse` its model, that it streams, and how);
    None for any other path."""
    family = FAMILIES.get(path)
    if family is not None:
        return family, {}
    for family in FAMILIES.values():
        fields = family.route(path, query)
        if fields is not None:
            return family, fields
    return None


def family_for(path: str, headers: Iterable[tuple[bytes, bytes]], query: str = "") -> Family:
    """The family of any request: its endpoint's (`endpoint_for`); on any other path (an
    unknown route, a model list), the first family whose address it is
    (`Family.addressed`: Google's `/v1beta/...`), else the first that claims it by its
    headers (`Family.claims`: Anthropic's `anthropic-version`), else OpenAI's chat."""
    found = endpoint_for(path, query)
    if found is not None:
        return found[0]
    headers = list(headers)
    return next((f for f in FAMILIES.values() if f.addressed(path, query)),
                next((f for f in FAMILIES.values() if f.claims(headers)),
                     next(iter(FAMILIES.values()))))


def error_body_of(path: str, headers: Iterable[tuple[bytes, bytes]], query: str = ""
                  ) -> Callable[[ReplayServerError], dict[str, Any]]:
    """The error envelope of any request: its family's (`family_for`; a wrong method on an
    endpoint too)."""
    return family_for(path, headers, query).error_body
