"""Anthropic's `GET /v1/models`, for a request that carries `anthropic-version`."""

from __future__ import annotations

import time
from typing import Any


def models_body(models: list[tuple[str, int | None]], created: int) -> dict[str, Any]:
    """Anthropic's list: `{"data": [{"type": "model", "id", "display_name", "created_at"}],
    "has_more", "first_id", "last_id"}` (one page of them all; no context length)."""
    names = [name for name, _ in models]
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    return {
        "data": [{"type": "model", "id": name, "display_name": name, "created_at": when}
                 for name in names],
        "has_more": False,
        "first_id": names[0] if names else None,
        "last_id": names[-1] if names else None,
    }
