"""`run --state URL`: the verdict of a rescoring served by every replica that shares the
state (docs/state.md), from `run`'s own start to its end.

`run` holds the prefix (one rescoring at a time: `RedisState.hold`), starts a fresh
rescoring (a reset: every cursor over, on every replica) and folds the journal from that
reset on, continuously, in a thread, so that `--stop-on-miss` and `--max-attempts` see a
miss on any replica as it happens. At the end it folds what is left, once the replicas'
last events have arrived (they send within milliseconds). A store it cannot read then
fails the run (`failed`): a verdict without it would be a guess.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx

from ..errors import StoreUnavailable
from ..replay.replayer import Replayer
from ..replay.state.redis import RedisState
from ..wire.credentials import shown

SETTLE_S = 0.2  # how long the replicas' last events have to arrive after COMMAND ended
WAIT_S = 5.0  # how long requests still open on a live replica are waited for
FOLD_MS = 200  # how long the folding thread waits for an event before it looks again
PROBES = 9  # status requests sent through --server: each replica of a round robin of 9


class Window:
    """What every replica served since `run` began (`open`), until `close`."""

    def __init__(self, replayer: Replayer, say: Callable[[str], None]) -> None:
        assert isinstance(replayer.state, RedisState)
        self.state: RedisState = replayer.state
        self.say = say
        self.failed: str | None = None  # why the store could not be read at the end
        # requests in flight on each replica that died (heartbeat gone, never stopped),
        # known at the end: their samples were given back; they fail the run only through
        # what they leave unused (a client that did not retry: exit 4)
        self.gone: dict[int, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._fold, daemon=True,
                                        name="replay-server run: journal")

    def open(self, event: dict[str, object]) -> None:
        """Hold the prefix, start a fresh rescoring, and fold from it on."""
        self.state.hold()
        started = self.state.reset(event)
        self.state.start_at(started)
        self._thread.start()
        self.say(f"replay-server run: a fresh rescoring on the shared state "
                 f"{self.state.shown} (prefix {self.state.prefix}), from journal entry "
                 f"{started.decode()}")

    def close(self) -> None:
        """Fold what is left: once the last events arrived, and every request still open
        on a live replica has its outcome (or `WAIT_S` passed); `failed` says why not
        (the store cannot be read, or lost the state meanwhile)."""
        self._done.set()
        self._thread.join(FOLD_MS / 1000 * 3)
        time.sleep(SETTLE_S)
        deadline = time.monotonic() + WAIT_S
        try:
            while True:
                self.state.fold(block_ms=None)
                if not self.open_on_live() or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.state.still_held()
            self.gone = self._in_flight(alive=False)
        except StoreUnavailable as error:
            self.failed = str(error)

    def open_on_live(self) -> dict[int, int]:
        """Requests begun and not yet given an outcome, per replica still alive."""
        return self._in_flight(alive=True)

    def _in_flight(self, alive: bool) -> dict[int, int]:
        """Requests begun without an outcome, per replica that never stopped cleanly and
        is alive (or dead: its heartbeat is gone)."""
        stats = self.state.stats
        return {r: n for r, n in stats.open.items() if n > 0 and r not in stats.stopped
                and self.state.alive(r) == alive}

    def _fold(self) -> None:
        while not self._done.is_set():
            try:
                self.state.fold(block_ms=FOLD_MS)
            except StoreUnavailable:
                self._done.wait(0.5)  # (the end's fold says it, if it still cannot)


def check_server(base_url: str, api_key: str | None, prefix: str) -> None:
    """Refuse (ValueError: exit 2, before COMMAND runs) a --server whose replicas do not
    all keep their state under `prefix`: a replica of another run's shape, of another
    --state-prefix, or without --state would answer requests whose misses this `run` never
    sees. Asks `/replay/status` through it `PROBES` times (a balancer's round robin shows
    each replica in turn)."""
    root = base_url.removesuffix("/v1")
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=10, headers=headers) as client:
        for _ in range(PROBES):
            try:
                answer = client.get(f"{root}/replay/status")
                answer.raise_for_status()
                state = answer.json().get("state")
            except (httpx.HTTPError, ValueError, AttributeError) as e:
                raise ValueError(f"--server {shown(base_url)}: no replay-server status "
                                 f"there ({type(e).__name__}: {e})") from None
            process = answer.json().get("process") or {}
            which = f"the replica on {process.get('host')} (pid {process.get('pid')})"
            theirs = state.get("prefix") if isinstance(state, dict) else None
            if theirs != prefix:
                said = theirs if theirs is not None else "no shared state (no --state)"
                raise ValueError(
                    f"--server {shown(base_url)}: {which} answers from {said}, not "
                    f"{prefix}: its requests would not count in this run's verdict. Serve "
                    "the same run with the same --state and --state-prefix on every "
                    "replica, and give run the same")
            if state.get("lost"):
                raise ValueError(f"--server {shown(base_url)}: {which} has lost the shared "
                                 f"state ({state['lost']}): restart the replicas, then run")
