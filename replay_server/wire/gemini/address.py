"""Where a Gemini request goes: the request fields its path and query carry, and whether a
request on no endpoint is Google's at all.

Google serves one method of a model at a path with the model in it, under an API version
(`v1`, the SDK's default; `v1beta`, LiteLLM's; `v1alpha`; Vertex AI's `v1beta1`), in the
Gemini Developer API's form or Vertex AI's:

    /{version}/models/{model}:{method}
    /{version}/projects/{project}/locations/{location}/publishers/google/models/{model}:{method}
    /{version}/publishers/google/models/{model}:{method}          (Vertex AI's express mode)

A model's name is whatever comes between `models/` and the method (a name with a slash in
it, `org/name`, too: a server of other models behind Google's API). Every form is the same
endpoint to the replay, whatever the version, project or location:
the saved records name it once, version-independent (`paths.GEMINI_PATH`,
`paths.GEMINI_COUNT_PATH`), the model in the record's `model`. `:streamGenerateContent` is
`:generateContent` streamed, and `alt=sse` its framing: neither is part of the key.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

VERSIONS = ("v1", "v1beta", "v1alpha", "v1beta1")
GENERATE = "generateContent"
STREAM = "streamGenerateContent"
COUNT = "countTokens"

_CALL = re.compile(
    r"/(?P<version>v1|v1beta|v1alpha|v1beta1)"
    r"(?:/projects/[^/]+/locations/[^/]+)?(?:/publishers/google)?"
    r"/models/(?P<model>.+):(?P<method>[A-Za-z]+)")
# Query parameters that only Google's API takes (its key, its model list's pages).
_GOOGLE_QUERY = frozenset({"key", "pageSize", "pageToken"})


def call(path: str) -> tuple[str, str] | None:
    """(model, method) of a path of the API's methods, or None."""
    found = _CALL.fullmatch(path)
    return (found["model"], found["method"]) if found is not None else None


def _query(query: str) -> dict[str, str]:
    return dict(parse_qsl(query, keep_blank_values=True)) if query else {}


def generate_fields(path: str, query: str) -> dict[str, Any] | None:
    """The fields a generateContent path carries: its model, whether it streams, and the
    stream's framing (`alt`, when the query names one); None for another path."""
    found = call(path)
    if found is None or found[1] not in (GENERATE, STREAM):
        return None
    fields: dict[str, Any] = {"model": found[0], "stream": found[1] == STREAM}
    alt = _query(query).get("alt")
    if alt is not None:
        fields["alt"] = alt
    return fields


def count_fields(path: str, query: str) -> dict[str, Any] | None:
    """The field a countTokens path carries, its model; None for another path."""
    found = call(path)
    return {"model": found[0]} if found is not None and found[1] == COUNT else None


def addressed(path: str, query: str) -> bool:
    """Whether a request is Google's by where it goes: a path of the API's methods, any
    path under a version only Google has (`/v1beta/...`) or under Vertex AI's
    `publishers/` and `projects/`, or a model path (`/v1/models...`) with a query only
    Google's clients send (`key`, `pageSize`, `pageToken`)."""
    version, _, rest = path[1:].partition("/")
    if version not in VERSIONS:
        return False
    if version != "v1" or rest.startswith(("publishers/", "projects/")) or call(path):
        return True
    return (rest == "models" or rest.startswith("models/")) and not _GOOGLE_QUERY.isdisjoint(
        _query(query))


def google(headers: Any) -> bool:
    """Whether a request carries Google's key header (`x-goog-api-key`), as Google's SDKs
    send a key: it tells Google's `GET /v1/models` from OpenAI's."""
    return any(name == b"x-goog-api-key" for name, _ in headers)
