"""Google's model list and model (`GET /{version}/models`, `GET /{version}/models/{model}`),
for a request of Google's API: each model's name (`models/NAME`), its methods, and its
input limit where the saved run knows it (recorded tokenizer answers), never invented."""

from __future__ import annotations

from typing import Any


def model_body(name: str, length: int | None, created: int = 0) -> dict[str, Any]:
    """One model, as `models.get` answers."""
    return {"name": f"models/{name}", "displayName": name,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
            **({"inputTokenLimit": length} if length is not None else {})}


def models_body(models: list[tuple[str, int | None]], created: int) -> dict[str, Any]:
    """The list (`models.list`): every model, in one page (no `nextPageToken`)."""
    return {"models": [model_body(name, length) for name, length in models]}
