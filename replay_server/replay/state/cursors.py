"""A request's view of the shared cursors (`View`: what `choose` reads, from the store,
each cursor once) and how a cursor's key is named in the store (`digest`). No store
client in here: the view asks its state (`RedisState.read`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from hashlib import sha256
from typing import Any, Protocol

from . import Conflict, Places


class Reader(Protocol):
    def read(self, cursor: str) -> tuple[int, int, int]: ...


class View(Mapping[Any, int]):
    """The cursors one request reads, from the store, each once: taken places, and places
    pending on a live replica (`pending`: then an exhausted prompt may still get one)."""

    def __init__(self, state: Reader) -> None:
        self.state = state
        self.seen: dict[Any, int] = {}
        self.epoch: int | None = None
        self.pending = False

    def __getitem__(self, cursor_key: Any) -> int:
        mask = self.seen.get(cursor_key)
        if mask is None:
            epoch, taken, pending = self.state.read(digest(cursor_key))
            if self.epoch is None:
                self.epoch = epoch
            elif epoch != self.epoch:
                raise Conflict  # (a reset between two reads: decide again)
            self.pending |= bool(pending)
            mask = self.seen[cursor_key] = taken | pending
        return mask

    def __contains__(self, cursor_key: object) -> bool:
        return True  # (a cursor never used is a cursor with nothing taken)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.seen)

    def __len__(self) -> int:
        return len(self.seen)


def digest(cursor_key: Any) -> str:
    """A cursor key (a tuple of names, prompt keys, parameters) as a key's last part."""
    return sha256(repr(cursor_key).encode()).hexdigest()[:32]


def pairs(places: Places) -> list[Any]:
    return [x for cursor_key, place in places for x in (digest(cursor_key), place)]
