"""COMMAND under `run`: started in a session of its own, and stopped whole.

`run` stops COMMAND on a signal (SIGINT, SIGTERM, SIGHUP: Ctrl-C, CI cancellation,
`timeout`, `docker stop`), at the first miss (`--stop-on-miss`), or when one request keeps
being refused (`--max-attempts`); everything COMMAND started must stop with it, or a
harness's workers go on against a dead server and write results full of failures.
COMMAND's process group is not enough: `timeout` moves its child to a group of its own,
a daemon moves to a session of its own, and a process whose parent ended is adopted by
init, out of reach of a walk by parent. So on Linux `run` makes itself a child subreaper
(`prctl(PR_SET_CHILD_SUBREAPER)`): an orphan of COMMAND's tree is adopted by `run` itself,
every process COMMAND started stays a descendant of `run`, and a stop walks /proc by
parent: SIGTERM to each process found (and to COMMAND's group), again to any that appears,
and SIGKILL to what is left after `GRACE_S` or at a second signal. Elsewhere (no /proc)
only COMMAND's process group is signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..replay.stats import Failure

GRACE_S = 10.0  # how long COMMAND's processes have to end after SIGTERM
# `run --max-attempts`: one distinct request refused this often stops COMMAND. Far above any
# client's retries (openai-python 3 attempts, lighteval 8, HELM 9, inspect eval-set 11):
# only a harness that resends a refusal at once, forever (evalplus), reaches it
MAX_ATTEMPTS = 50
POLL_S = 0.05
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def _subreaper(on: bool) -> None:
    """Make this process adopt its descendants' orphans, or stop (Linux; elsewhere
    nothing)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def processes() -> dict[int, tuple[int, bool]]:
    """Every process, by pid: its parent's pid, and whether it is a zombie (ended, not yet
    reaped). Empty without /proc."""
    found = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    # pid (comm) state ppid ...: comm may hold spaces and parentheses
                    state, parent = f.read().rpartition(b")")[2].split()[:2]
            except (OSError, ValueError):
                continue  # (it ended meanwhile)
            found[int(name)] = (int(parent), state == b"Z")
    return found


class Command:
    """COMMAND's process, and everything it started: stopped once, whatever asks first (one
    stopped before it started never starts)."""

    def __init__(self) -> None:
        self.own = os.getpid()
        self.before: set[int] = set()  # this process's children before COMMAND's start
        self.proc: subprocess.Popen[bytes] | None = None
        # Re-entrant: a signal handler runs in the main thread, between any two bytecodes,
        # and may interrupt another's stop (a second signal)
        self.lock = threading.RLock()
        self.why: str | None = None  # why it was stopped, once it is
        self.signum: int | None = None  # the signal that stopped it
        self.hurry = threading.Event()  # kill what is left now
        self.stopper: threading.Thread | None = None

    def start(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        """Start COMMAND in a session of its own, this process its orphans' subreaper."""
        self.before = {pid for pid, (parent, _) in processes().items() if parent == self.own}
        with self.lock:
            if self.why is not None:
                return
            _subreaper(True)
            try:
                self.proc = subprocess.Popen(list(argv), env=env, start_new_session=True)
            except OSError:
                _subreaper(False)
                raise
            if self.why is not None:  # (a signal came meanwhile)
                self._begin()

    def stop(self, why: str, signum: int | None = None) -> bool:
        """Stop COMMAND and everything it started, in a thread of its own (a hook or a
        signal handler must not wait); the first reason stands, and another signal kills
        what is left at once. True when this call began the stop."""
        with self.lock:
            if self.why is not None:
                if signum is not None:
                    self.hurry.set()
                return False
            self.why, self.signum = why, signum
            if self.proc is not None:
                self._begin()
            return True

    def _begin(self) -> None:
        self.stopper = threading.Thread(target=self._terminate, daemon=True)
        self.stopper.start()

    def wait(self) -> int:
        """COMMAND's exit status, once it (and, when stopped, all it started) ended: its
        own, as a shell gives it (128+N for a signal N), or 128+N when a signal N to `run`
        stopped it."""
        code = self.proc.wait() if self.proc is not None else 0
        with self.lock:
            stopper = self.stopper
        if stopper is not None:
            stopper.join()
        _subreaper(False)
        self._reap()
        if self.signum is not None:
            return 128 + self.signum
        return 128 - code if code < 0 else code

    def members(self) -> list[int]:
        """The live processes COMMAND started, itself included: the descendants of COMMAND
        and of the orphans this process adopted (its children but COMMAND's, bar those it
        had before)."""
        if self.proc is None:
            return []
        table = processes()
        if not table:  # no /proc: COMMAND's group is all that is known
            return [self.proc.pid] if self.proc.poll() is None else []
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in table.items():
            children.setdefault(parent, []).append(pid)
        todo = [pid for pid in children.get(self.own, []) if pid not in self.before]
        found, seen = [], set()
        while todo:
            pid = todo.pop()
            if pid not in seen:
                seen.add(pid)
                if not table[pid][1]:  # (a zombie has ended)
                    found.append(pid)
                todo += children.get(pid, [])
        return found

    def _terminate(self) -> None:
        """SIGTERM to each of COMMAND's processes (and its group), to any that appears
        meanwhile too; SIGKILL to what is left after GRACE_S or at `hurry`; until none is
        left (or a second grace period has passed: a process stuck in the kernel)."""
        assert self.proc is not None  # (begun once it started)
        command, start, sent = self.proc.pid, time.monotonic(), set()
        while (left := self.members()) and time.monotonic() < start + 2 * GRACE_S:
            late = self.hurry.is_set() or time.monotonic() > start + GRACE_S
            sig = signal.SIGKILL if late else signal.SIGTERM
            with contextlib.suppress(OSError):
                os.killpg(command, sig)  # (a pgid stays taken while its group lives)
            for pid in left:
                if (pid, sig) not in sent:
                    sent.add((pid, sig))
                    with contextlib.suppress(OSError):
                        os.kill(pid, sig)
            self._reap()
            if late:
                time.sleep(POLL_S)
            else:
                self.hurry.wait(POLL_S)  # (a second signal: on at once)

    def _reap(self) -> None:
        """Reap the ended orphans this process adopted (COMMAND itself is Popen's)."""
        command = self.proc.pid if self.proc is not None else None
        for pid, (parent, zombie) in processes().items():
            if parent == self.own and zombie and pid != command and pid not in self.before:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)


def on_refusal(stop: Callable[[str], None], stop_on_miss: bool, max_attempts: int
              ) -> Callable[[Failure, bool], None]:
    """What `run` does at each failing attempt (`Stats.on_error`): stop COMMAND at the
    first miss (--stop-on-miss), or once one distinct request, replayed or forwarded
    upstream, has been refused `max_attempts` times (a harness that resends a refused
    request at once, forever, would never end)."""
    def on_error(failure: Failure, miss: bool) -> None:
        if stop_on_miss and miss:
            stop("at the first miss (--stop-on-miss)")
        elif max_attempts and failure.attempts >= max_attempts:
            first = failure.first
            stop(f"when one request had been refused {failure.attempts} times "
                 f"(--max-attempts {max_attempts}; 0 never stops): "
                 f"[{first.get('code', 'unanswered')}] {first['endpoint']} "
                 f"model={first['model']}: {first.get('message') or first.get('why')}")
    return on_error


@contextlib.contextmanager
def stopped_by_signals(stop: Callable[[str, int], object]) -> Iterator[None]:
    """While this lasts, SIGINT, SIGTERM and SIGHUP call `stop(name, signum)` instead of
    ending `run` (which then reports): the main thread's, where signals are handled."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        stop(signal.Signals(signum).name, signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)
