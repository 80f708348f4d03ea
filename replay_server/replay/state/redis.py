"""The shared state (`--state redis://...`): cursors, replicas and the journal of counts in
Redis or Valkey, so that workers and replicas serve each saved sample exactly once across
all of them and report one verdict (docs/state.md). The only module that imports `redis`.

A request's samples are taken optimistically: read the cursors it needs (`View`, one
script per cursor: taken, or pending on a live replica), decide, then claim every place
at once (`scripts.CLAIM`, pending by this replica), and once the answer left commit them
(taken) or give them back, with the answer's event, in one script. Each replica keeps a
heartbeat key that expires: a replica that dies leaves its pending places free.
Events go to the journal (a stream) from a background thread within milliseconds; a miss
is written before its error is sent. Every reader folds the journal into a Stats of its
own (`current`). A store that cannot be reached is never worked around: the request gets
StoreUnavailable (503), and its event is kept and sent once the store is back.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

import orjson

from ...errors import LoadError, StoreUnavailable
from ...index.samples import Cursors, Rules
from ..stats import Stats
from . import Busy, Conflict, Places, State, journal, scripts
from .cursors import View, pairs

try:
    import redis
except ImportError:  # pragma: no cover (the `state` extra)
    redis = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

HEARTBEAT_MS = 5000  # a replica silent this long is dead: its pending places are free
BEAT_S = 1.0  # how often a replica says it is alive
TIMEOUT_S = 2.0  # a store slower than this is unavailable
FLUSH_S = 0.002  # how long events wait to be sent together
LOCK_MS = 15000  # `run`'s hold on the prefix, refreshed with the heartbeat
_REVERSE = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))  # (Redis bits: MSB first)


def connect(url: str, shown: str) -> Any:
    """A client of the store at `url` (`shown`: the URL without credentials, for errors)."""
    if redis is None:
        raise LoadError("--state", None, "a shared state needs the redis package: pip "
                        "install 'replay-server[state]'")
    try:
        return redis.Redis.from_url(url, socket_timeout=TIMEOUT_S,
                                    socket_connect_timeout=TIMEOUT_S)
    except ValueError as e:
        raise LoadError("--state", None, f"{shown}: {e}") from None


class RedisState(State):
    """The state of every replica of one run, in the store at `url` under `prefix`."""

    shared = True

    def __init__(self, stats: Stats, url: str, shown: str, prefix: str,
                 rules: Rules) -> None:
        super().__init__(stats)
        self.shown, self.prefix = shown, prefix
        self.client = connect(url, shown)
        self.scripts = {name: self.client.register_script(getattr(scripts, name))
                        for name in ("READ", "CLAIM", "COMMIT", "RELEASE", "RESET", "REFRESH")}
        self.down: str | None = None  # why the store cannot be reached, while it cannot
        self.lost: str | None = None  # why the store no longer holds the state: for good
        self.holding = False  # (`run`'s hold on the prefix: `hold`)
        self.lapsed: str | None = None  # why the hold is no longer this run's
        self._ops: list[tuple[str, list[Any]]] = []  # events and settles, to send
        self._lock = threading.Lock()  # (the list above)
        self._sending = threading.Lock()  # (one sender at a time: events stay in order)
        self._folding = threading.Lock()
        self._read_id = b"0-0"  # the last journal entry folded into `stats`
        self._wake = threading.Event()
        self._closed = threading.Event()
        self.replica = self._register(journal.registered(stats.index, rules))
        self._thread = threading.Thread(target=self._background, daemon=True,
                                        name=f"replay-server state {self.replica}")
        self._thread.start()

    def about(self) -> dict[str, Any] | None:
        return {"store": self.shown, "prefix": self.prefix, "replica": self.replica,
                "lost": self.lost}

    def key(self, *parts: object) -> str:
        return ":".join((self.prefix, *map(str, parts)))

    def _register(self, registered: dict[str, Any]) -> int:
        """This process's replica id, once the run's shape and rules (`registered`) are
        the ones under the prefix."""
        mine = orjson.dumps(registered, option=orjson.OPT_SORT_KEYS)
        try:
            self.client.set(self.key("shape"), mine, nx=True)
            theirs = self.client.get(self.key("shape"))
            if theirs != mine:
                raise LoadError("--state", None, f"{self.shown} prefix {self.prefix!r} holds "
                                f"another run, or this one served by other rules (--strict, "
                                f"--allow-ambiguous: other cursors) ({theirs.decode()}); "
                                f"this one is {mine.decode()}: serve it as the others do, "
                                "or use another --state-prefix")
            replica = int(self.client.incr(self.key("replicas")))
            self.client.hset(self.key("replica", replica), mapping={
                "host": socket.gethostname(), "pid": os.getpid(), "started": time.time()})
            self.client.set(self.key("alive", replica), 1, px=HEARTBEAT_MS)
        except redis.RedisError as e:
            raise LoadError("--state", None, f"cannot reach {self.shown}: {e}") from None
        return replica

    def _unavailable(self, error: Exception) -> StoreUnavailable:
        self.down = f"{type(error).__name__}: {error}"
        log.error("shared state %s unavailable: %s", self.shown, self.down)
        return StoreUnavailable(f"the shared state ({self.shown}) cannot be reached "
                                f"({self.down}): this request cannot be answered without it")

    def _lost_state(self) -> StoreUnavailable:
        """The store no longer holds this run's state (it restarted without persisting
        it): which samples were served is forgotten, so nothing is served from it again
        by this replica (restart the replicas, and rescore from the start)."""
        if self.lost is None:
            self.lost = (f"the shared state ({self.shown}) lost this run's state (the store "
                         "restarted without persisting it?): which saved samples were served "
                         "is forgotten, so no request is answered from it; restart the "
                         "replicas and rescore")
            log.error("%s", self.lost)
        return StoreUnavailable(self.lost)

    def check(self) -> None:
        if self.lost is not None:
            raise StoreUnavailable(self.lost)
        if self.down is not None:
            raise StoreUnavailable(f"the shared state ({self.shown}) cannot be reached "
                                   f"({self.down}): no request is answered without it")

    def cursors(self) -> Cursors:
        return View(self)

    def busy(self, view: Cursors) -> Busy | None:
        if isinstance(view, View) and view.pending:
            return Busy(0.05, HEARTBEAT_MS / 1000 + 2)
        return None

    def read(self, cursor: str) -> tuple[int, int, int]:
        """A cursor's epoch, taken places and places pending on a live replica."""
        try:
            epoch, *found = self.scripts["READ"](args=[self.prefix, cursor])
        except redis.RedisError as e:
            raise self._unavailable(e) from None
        if epoch == -1:
            raise self._lost_state()
        taken, live = found
        pending = 0
        for place in live:
            pending |= 1 << int(place)
        return int(epoch), int.from_bytes(taken.translate(_REVERSE), "little"), pending

    def claim(self, view: Cursors, places: Places) -> int:
        assert isinstance(view, View) and view.epoch is not None
        try:
            claimed = self.scripts["CLAIM"](args=[self.prefix, view.epoch, self.replica,
                                                  *pairs(places)])
        except redis.RedisError as e:
            raise self._unavailable(e) from None
        if claimed == -1:
            raise self._lost_state()
        if not claimed:
            raise Conflict
        return view.epoch

    def commit(self, places: Places, epoch: int, event: dict[str, Any]) -> None:
        """Taken, with the answer's event; which places it took in which epoch go along,
        so that every reader finds a place delivered twice in one pass (`Stats.taken`):
        what a store that lost its last writes (an asynchronous failover) would do."""
        if places:
            event = {**event, "epoch": epoch, "places": pairs(places)}
        self._queue("COMMIT" if places else "event", event, epoch, places)

    def give_back(self, places: Places, epoch: int, event: dict[str, Any]) -> None:
        """At once (rare: the client left): the next request for the prompt, on any
        replica, gets the sample given back before any later one, as in one process."""
        self._queue("RELEASE" if places else "event", event, epoch, places)
        if places:
            try:
                self._send()
            except StoreUnavailable:
                pass  # (kept, sent once the store is back; meanwhile nothing is answered)

    def record(self, event: dict[str, Any], now: bool = False) -> Any:
        self._queue("event", event)
        if now:
            try:
                self._send()
            except StoreUnavailable as error:
                error.kept = True
                raise
        return None

    def reset(self, event: dict[str, Any]) -> bytes:
        """A new epoch for every replica, and the reset's event; its journal id."""
        self._send()
        try:
            found: bytes = self.scripts["RESET"](args=[self.prefix,
                                                       journal.encode(event)])
        except redis.RedisError as e:
            raise self._unavailable(e) from None
        return found

    def current(self) -> Stats:
        """The Stats of every event in the journal so far (this replica's sent first)."""
        self._send()
        self.fold(block_ms=None)
        return self.stats

    def fold(self, block_ms: int | None) -> None:
        """Apply the journal's entries after the last one applied (waiting up to
        `block_ms` for one, when given: without holding the others up meanwhile)."""
        while True:
            start = self._read_id
            try:
                found = self.client.xread({self.key("journal"): start}, count=10_000,
                                          block=block_ms)
            except redis.RedisError as e:
                raise self._unavailable(e) from None
            if not found:
                return
            with self._folding:  # (each entry once, whoever read it first)
                for entry_id, fields in found[0][1]:
                    if _order(entry_id) > _order(self._read_id):
                        self._apply(entry_id, fields[b"e"])
                        self._read_id = entry_id
            block_ms = None

    def _apply(self, entry_id: bytes, data: bytes) -> None:
        """Count one entry; one that cannot be counted (another version's, another
        tool's, damaged) may have been a miss, so it is a failure (`run` fails), not a
        gap in the counts."""
        try:
            self.stats.apply(journal.decode(data, self.stats.index))
            return
        except (ValueError, KeyError, IndexError, TypeError) as e:
            why = (f"journal entry {entry_id.decode()} cannot be counted ({type(e).__name__}: "
                   f"{e}): is another program writing under the prefix {self.prefix}?")
        log.error("shared state %s: %s", self.shown, why)
        self.stats.error(None, "-", 500, "replay_state_lost", why, {}, time.time())

    def start_at(self, entry_id: bytes) -> None:
        """Fold from the entry after `entry_id` on (`run`: from its reset)."""
        with self._folding:
            self._read_id = entry_id

    def hold(self) -> None:
        """Hold the prefix for one `run` (its verdict's window begins with its reset: two
        at once would mix their requests); refreshed with the heartbeat, let go at
        `close`. LoadError if another `run` holds it."""
        try:
            held = self.client.set(self.key("run"), self.replica, nx=True, px=LOCK_MS)
            holder = None if held else self.client.get(self.key("run"))
        except redis.RedisError as e:
            raise LoadError("--state", None, f"cannot reach {self.shown}: {e}") from None
        if not held:
            raise LoadError("--state", None, f"another `replay-server run` (replica "
                            f"{holder.decode() if holder else '?'}) is rescoring this run "
                            f"on {self.shown} (prefix {self.prefix!r}): one at a time; "
                            "wait until it ends, or give this rescoring a --state-prefix of "
                            "its own (with --server, on replicas serving under that prefix)")
        self.holding = True

    def still_held(self) -> None:
        """Raise StoreUnavailable unless the store still holds the state (`_lost_state`),
        and `run`'s hold is still this one's (`_refresh`)."""
        try:
            held = self.client.exists(self.key("shape"))
        except redis.RedisError as e:
            raise self._unavailable(e) from None
        if not held:
            raise self._lost_state()
        self._refresh()
        if self.lapsed is not None:
            raise StoreUnavailable(self.lapsed)

    def _refresh(self) -> None:
        """Keep `run`'s hold while it is still this one's; once it lapsed (this process
        stalled, or lost the store, for longer than LOCK_MS), never take it back: another
        `run` may hold the prefix and have reset it, so this rescoring's requests are no
        longer its own alone, and it fails (`still_held`)."""
        if not self.holding:
            return
        try:
            kept = self.scripts["REFRESH"](args=[self.prefix, self.replica, LOCK_MS])
        except redis.RedisError as e:
            raise self._unavailable(e) from None
        if not kept:
            self.holding = False  # (what the key holds now is not this run's to delete)
            self.lapsed = (f"this `replay-server run`'s hold on the prefix {self.prefix!r} "
                           f"lapsed (it stalled, or lost {self.shown}, for over "
                           f"{LOCK_MS // 1000} s): another `replay-server run` may have "
                           "reset the state and served its own rescoring meanwhile")
            log.error("shared state: %s", self.lapsed)

    def alive(self, replica: int) -> bool:
        try:
            return bool(self.client.exists(self.key("alive", replica)))
        except redis.RedisError as e:
            raise self._unavailable(e) from None

    def close(self) -> None:
        """Send what is left, say this replica stopped, and let its heartbeat go."""
        self._queue("event", {"kind": "stopped", "replica": self.replica})
        self._closed.set()
        self._thread.join(TIMEOUT_S * 3)
        try:
            self._send()
            self.client.delete(self.key("alive", self.replica))
            if self.holding:
                self.client.delete(self.key("run"))
        except (StoreUnavailable, redis.RedisError) as e:
            log.error("shared state %s: could not say that replica %d stopped (%s)",
                      self.shown, self.replica, e)
        self.client.close()

    def _queue(self, op: str, event: dict[str, Any], epoch: int = 0,
               places: Places = ()) -> None:  # type: ignore[assignment]
        args = [self.prefix, epoch, self.replica, journal.encode(event), *pairs(places)]
        with self._lock:
            self._ops.append((op, args))
        self._wake.set()

    def _send(self) -> None:
        """Send every queued event and settle, in order, in one transaction; on failure
        they stay queued (sent once the store is back) and StoreUnavailable is raised."""
        with self._sending:
            with self._lock:
                ops, self._ops = self._ops, []
            if not ops:
                return
            try:
                pipe = self.client.pipeline(transaction=True)
                for op, args in ops:
                    if op == "event":
                        pipe.xadd(self.key("journal"), {"e": args[3]})
                    else:
                        self.scripts[op](args=args, client=pipe)
                results = pipe.execute()
            except redis.RedisError as e:
                with self._lock:
                    self._ops[:0] = ops
                raise self._unavailable(e) from None
            self.down = None
        lost = [args for (op, args), result in zip(ops, results, strict=True)
                if op == "COMMIT" and result == 1]
        for args in lost:
            self._lost(args)
        if lost:
            self._send()  # (a failure is written at once, as a miss is)

    def _lost(self, args: list[Any]) -> None:
        """A committed answer whose places may have gone to another replica meanwhile
        (this one's heartbeat lapsed): a sample may have been served twice. Loud."""
        event = orjson.loads(args[3])
        why = (f"replica {self.replica}'s heartbeat lapsed before its answer was committed: "
               "the saved sample it served may have been served by another replica too")
        log.error("shared state: %s (model=%s %s)", why, event["model"], event["endpoint"])
        self._queue("event", {"kind": "error", "replica": self.replica,
                              "model": event["model"], "endpoint": event["endpoint"],
                              "status": 500, "code": "replay_state_lost", "message": why,
                              "detail": {}, "time": round(time.time(), 3)})

    def _background(self) -> None:
        """Send queued events every few milliseconds, and beat the heartbeat."""
        beat = 0.0
        while not self._closed.is_set():
            self._wake.wait(BEAT_S)
            self._wake.clear()
            time.sleep(FLUSH_S)
            try:
                if time.monotonic() - beat >= BEAT_S:
                    self._beat()
                    beat = time.monotonic()
                self._send()
            except (StoreUnavailable, redis.RedisError):
                self._closed.wait(0.5)  # (logged once it happened; tried again)

    def _beat(self) -> None:
        try:
            if not self.client.exists(self.key("shape")):
                self._lost_state()
            self.client.set(self.key("alive", self.replica), 1, px=HEARTBEAT_MS)
        except redis.RedisError as e:
            raise self._unavailable(e) from None
        self._refresh()


def _order(entry_id: bytes) -> tuple[int, int]:
    """A stream entry id (`MS-SEQ`) in the stream's order."""
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq)
