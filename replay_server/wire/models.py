"""`GET /v1/models`: the models the server holds, shaped like vLLM's list, or like
Anthropic's for a request that carries `anthropic-version`."""

from __future__ import annotations

import time
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


def anthropic_models_body(names: list[str], created: int) -> dict[str, Any]:
    """Anthropic's list: `{"data": [{"type": "model", "id", "display_name", "created_at"}],
    "has_more", "first_id", "last_id"}` (one page of them all)."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    return {
        "data": [{"type": "model", "id": name, "display_name": name, "created_at": when}
                 for name in names],
        "has_more": False,
        "first_id": names[0] if names else None,
        "last_id": names[-1] if names else None,
    }
