"""The replay's state: which saved samples the repeats cursors handed out, and the counts
(`Stats`). This module holds the interface, and the in-process state (the default: a dict
of cursors in this process, counted at once); `redis.py` holds the shared one (`--state`),
which every worker and replica of one run share through Redis or Valkey.

The Replayer decides a request against a view of the cursors (`cursors`: what `choose`
reads), then claims the places it chose (`claim`, which may find that another replica
took one first: `Conflict`, and the Replayer decides again), and once its answer left,
commits them (`commit`) or gives them back (`give_back`). Every count is an event
(`Stats.apply`); `record` counts it, `current` is the Stats of every event so far.
A state never answers a request on its own: a store that cannot be reached is a loud
error (`errors.StoreUnavailable`), never an answer.
"""

from __future__ import annotations

from typing import Any

from ...index.index import Index
from ...index.samples import Cursors, Rules
from ..stats import Stats

Places = list[tuple[Any, int]]  # (cursor key, place) of each sample a request takes


class Conflict(Exception):
    """Another replica claimed one of the chosen places first: decide again."""


class Busy(Exception):
    """Every sample of a prompt is taken or promised to an answer still on its way on a
    live replica: if that answer is never delivered, its sample comes back. The caller
    waits `retry_s` and asks again, for at most `wait_s` in all; then it decides."""

    def __init__(self, retry_s: float, wait_s: float) -> None:
        super().__init__("every saved sample is taken or pending on a live replica")
        self.retry_s, self.wait_s = retry_s, wait_s


class State:
    """The in-process state: the cursors (per cursor key, the places taken, a bit each)
    and the resets so far (`epoch`: a place taken before the last reset is free again),
    in this process only; events counted at once. One replica: id 0."""

    replica = 0
    shared = False

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.taken: dict[Any, int] = {}
        self.epoch = 0

    def cursors(self) -> Cursors:
        """What `choose` reads for one request."""
        return self.taken

    def about(self) -> dict[str, Any] | None:
        """Where the state is shared, for `/replay/status` (None: in this process)."""
        return None

    def busy(self, view: Cursors) -> Busy | None:
        """Whether `view` saw samples promised to answers still on their way (never here:
        a sample is taken at once)."""
        return None

    def check(self) -> None:
        """Raise StoreUnavailable if the state cannot be reached (never here)."""

    def claim(self, view: Cursors, places: Places) -> int:
        """Take `places`, chosen from `view`; the epoch they belong to."""
        taken = self.taken
        for cursor_key, place in places:
            taken[cursor_key] = taken.get(cursor_key, 0) | 1 << place
        return self.epoch

    def commit(self, places: Places, epoch: int, event: dict[str, Any]) -> None:
        """The answer that took `places` was delivered: `event` counts it."""
        self.stats.apply(event)

    def give_back(self, places: Places, epoch: int, event: dict[str, Any]) -> None:
        """The answer that took `places` never left: they are free again (unless a reset
        freed them already), and `event` counts it."""
        if epoch == self.epoch:
            for cursor_key, place in places:
                self.taken[cursor_key] &= ~(1 << place)
        self.stats.apply(event)

    def record(self, event: dict[str, Any], now: bool = False) -> Any:
        """Count `event`; what `Stats.apply` returns (None where it is counted later).
        `now`: a miss, kept before its error is sent (a shared state writes it at once:
        a replica killed right after must not lose a miss a client saw)."""
        return self.stats.apply(event)

    def reset(self, event: dict[str, Any]) -> bytes | None:
        """Start every cursor over (a new epoch), and count the reset; where it stands in
        a shared journal (None: there is none)."""
        self.taken.clear()
        self.epoch += 1
        self.stats.apply(event)
        return None

    def current(self) -> Stats:
        """The counts of every event so far."""
        return self.stats

    def where(self) -> str | None:
        """Where a shared state lives, for the user (None: in this process)."""
        about = self.about()
        if about is None:
            return None
        return (f"{about['store']} under the prefix {about['prefix']} (this process: "
                f"replica {about['replica']})")

    def close(self) -> None:
        """Stop for good (a shared state says so to the others)."""


def shared(index: Index, url: str, shown: str, prefix: str | None = None,
           rules: Rules | None = None) -> State:
    """The state kept in Redis or Valkey at `url` (`shown`: the URL without credentials,
    as errors name it), under `prefix` (default: `replay-server:` and a digest of the
    run's shape), for a replica choosing samples by `rules` (default: neither --strict
    nor --allow-ambiguous): this process a replica of its own. LoadError when the store
    cannot be reached, lacks the package, or holds another run, or this one served by
    other rules, under the prefix."""
    from .journal import shape_digest
    from .redis import RedisState  # (only with --state: the `state` extra)

    return RedisState(Stats(index), url, shown,
                      prefix or f"replay-server:{shape_digest(index)}", rules or Rules())
