"""`GET /v1/models`: the models the server holds, shaped like vLLM's list."""

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
