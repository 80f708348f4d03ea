"""`GET /v1/models`: the models the server holds, shaped like vLLM's list (the `Family`
default: `Family.models`; an API with a list of its own says so in its package)."""

from __future__ import annotations

from typing import Any


def models_body(models: list[tuple[str, int | None]], created: int) -> dict[str, Any]:
    """vLLM's list of `(name, max_model_len)`: a model's `max_model_len` only when the
    saved run knows it (recorded tokenizer answers), never invented."""
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "replay-server",
             "root": name, "parent": None,
             **({"max_model_len": length} if length is not None else {})}
            for name, length in models
        ],
    }


def entry_problem(model: str, entry: Any) -> str | None:
    """Why a recorded entry of the list is not `model`'s (what its record must hold), or
    None."""
    if not isinstance(entry, dict) or entry.get("id") != model:
        return "expected the model's entry of /v1/models (an object whose `id` is `model`)"
    length = entry.get("max_model_len")
    if length is not None and type(length) is not int:
        return "`max_model_len` must be an integer"
    return None
