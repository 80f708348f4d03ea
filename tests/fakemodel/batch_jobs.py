"""What the fake's two batch APIs share (openai_batches.py, anthropic_batches.py): a job
whose status moves one stage a poll, each line answered by the fake's own route for it, and
the lists' cursor pages.

A line is answered by sending it, in the process, to the route that answers the same
request sent alone (through the app itself, `httpx.ASGITransport`): so a batch's line and
the single request get the same answer, its errors included, and the wire log has the line
as that request. Lines are answered when the job reaches its results stage, not at create,
so a batch cancelled before gets no answers, as the APIs' own do not run cancelled lines.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from starlette.requests import Request

T = TypeVar("T")


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


async def answer(request: Request, path: str, body: Any,
                 headers: dict[str, str]) -> tuple[int, Any]:
    """(status, JSON body) of `body` sent alone to the fake's route `path`."""
    transport = httpx.ASGITransport(app=request.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://fakemodel") as client:
        got = await client.post(path, json=body, headers=headers)
    return got.status_code, got.json()


@dataclass
class Job:
    """A batch whose status is `stages[at]`: each poll (retrieve) moves it one stage on, so
    a client's poll loop goes round a few times; `results_at` is the stage whose poll
    answers the lines (`answered`, set once)."""

    id: str
    stages: list[str]
    results_at: int
    created: float = field(default_factory=time.time)
    at: int = 0
    reached: dict[str, float] = field(default_factory=dict)
    answered: list[Any] | None = None

    @property
    def status(self) -> str:
        return self.stages[self.at]

    @property
    def ended(self) -> bool:
        return self.at == len(self.stages) - 1

    def poll(self) -> bool:
        """Move one stage on; True when this poll reached the results stage."""
        if self.ended:
            return False
        self.at += 1
        self.reached.setdefault(self.status, time.time())
        return self.at == self.results_at

    def end_as(self, stages: Sequence[str]) -> None:
        """Go on through `stages` instead (a cancel, a failed validation)."""
        self.stages = [*self.stages[:self.at + 1], *stages]
        self.results_at = len(self.stages)  # never: nothing is answered


def page(items: Sequence[T], ident: Callable[[T], str], after: str | None, before: str | None,
         limit: int) -> tuple[list[T], bool]:
    """The items after (or before) the one with id `after` (`before`), `limit` of them, and
    whether there are more: the APIs' cursor pagination (items newest first)."""
    ids = [ident(item) for item in items]
    if before is not None and before in ids:
        start = max(ids.index(before) - limit, 0)
        return list(items[start:ids.index(before)]), start > 0
    start = ids.index(after) + 1 if after in ids else 0
    chosen = list(itertools.islice(items, start, start + limit))
    return chosen, start + limit < len(items)
