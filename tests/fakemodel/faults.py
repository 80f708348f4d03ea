"""Faults on demand: a chat request whose messages hold `[fault: KIND]` fails as a busy real
server does, so that tests can see what a client's retries and `replay-server run` make of
it (a judge's 429 that a retry recovers, a judge call the client gives up on).

- `[fault: 429]`: refused with OpenAI's rate-limit error (HTTP 429, `rate_limit_exceeded`)
  and `retry-after-ms: 10`, which openai-python waits before it retries (its own backoff
  is half a second and more);
- `[fault: hang]`: never answered; the server waits until the client leaves (at most a
  minute), as an overloaded server would keep a client waiting past its timeout.

`[fault: KIND once]` faults only the first request of that exact conversation and answers
the later ones as usual, so that a retry gets through.
"""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

FAULT_RE = re.compile(r"\[fault: (429|hang)( once)?\]")
HANG_LIMIT_S = 60.0


class Faults:
    """Which conversations faulted already (for `once`)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def of(self, body: dict[str, Any]) -> str | None:
        """The fault this request asks for now, or None (answer it)."""
        text = repr(body.get("messages"))
        found = FAULT_RE.search(text)
        if found is None:
            return None
        if found[2]:
            with self.lock:
                if text in self.seen:
                    return None
                self.seen.add(text)
        return found[1]


async def respond(kind: str, request: Request) -> Response:
    """The faulty answer: a 429, or none until the client leaves."""
    if kind == "429":
        return JSONResponse({"error": {
            "message": "Rate limit reached for requests. Please try again in 10ms.",
            "type": "requests", "param": None, "code": "rate_limit_exceeded"}},
            status_code=429, headers={"retry-after-ms": "10"})
    waited = 0.0
    while waited < HANG_LIMIT_S and not await request.is_disconnected():
        await asyncio.sleep(0.05)
        waited += 0.05
    return Response(status_code=504)
