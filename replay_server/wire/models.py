"""`GET /v1/models`: the models the server holds, shaped like vLLM's list."""

from __future__ import annotations

from typing import Any


def models_body(names: list[str], created: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "replay-server",
             "root": name, "parent": None, "max_model_len": None}
            for name in names
        ],
    }
