"""What a reply is made from: the saved exchanges (and choices) that answer a request, as
the index hands them over. Every family's bodies and streams read them through `Saved`,
never the index's own classes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar


class Saved(Protocol):
    """A saved exchange, as reply bodies and streams read it (`index.Exchange` is one)."""

    @property
    def body(self) -> bytes: ...  # the saved response body, byte for byte

    @property
    def frames(self) -> bytes | None: ...  # a recorded stream's frames, as sent

    # (start, size, whether the recorded stream carries a usage chunk), or None
    stream: tuple[int, int, bool] | None
    sample_usage: tuple[dict[str, Any] | None, ...] | None  # each choice's own usage
    batch: dict[str, Any] | None  # the batched completion it was saved from


S = TypeVar("S", bound=Saved)
Selection = Sequence[tuple[S, int | None]]
"""The saved exchanges (and choices) that answer one prompt, in order; a choice of None
stands for the whole exchange."""


def whole(selections: Sequence[Selection[S]]) -> S | None:
    """The one saved exchange that answers the request whole, if that is the case."""
    if len(selections) == 1 and len(selections[0]) == 1 and selections[0][0][1] is None:
        return selections[0][0][0]
    return None


def encode(selections: Sequence[Selection[Saved]]) -> bytes:
    """The body of a reply that one whole saved exchange answers: its saved bytes."""
    exchange = whole(selections)
    assert exchange is not None, "several exchanges answer: the family assembles a body"
    return exchange.body
