"""apt-get for the container test's tools, waiting for apt's locks.

A fresh machine's automatic updates (unattended-upgrades, apt's daily timer) hold apt's
locks in its first minutes, and an apt-get that finds one held fails at once: `make test`
then failed with an error in every container test. apt-get's own `-o
DPkg::Lock::Timeout=SECONDS` waits only for dpkg's locks; `apt-get update` still fails at
once on the lists lock, and `install` on the archives lock. So `apt_get` first waits until
none of apt's locks is held (as `/proc/locks` shows them, taking none itself), up to a
bound, and gives apt-get what is left of it as its dpkg lock timeout, for a lock taken in
between; an apt-get that still fails on a lock taken in between is retried once the lock
is free again; past the bound it fails, naming the process that holds the lock and its
command.
"""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# dpkg's (the frontend's, taken first, then its own), the lists' (update) and the
# downloaded archives' (install)
LOCKS = tuple(Path(p) for p in ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock",
                                "/var/lib/apt/lists/lock", "/var/cache/apt/archives/lock"))
WAIT_S = 600.0  # a first boot's automatic updates take minutes, not tens of them
POLL_S = 0.2
RUN_S = 600.0  # apt-get's own time, once the locks are free


@dataclass(frozen=True)
class Holder:
    """A process holding a lock on `path`."""

    path: Path
    pid: int

    @property
    def command(self) -> str:
        try:
            argv = Path(f"/proc/{self.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:
            return "(gone, or in another PID namespace)"
        return shlex.join(arg.decode(errors="replace") for arg in argv)


class LockHeld(Exception):
    """apt's lock stayed held past the bound."""


def holders(paths: Sequence[Path]) -> list[Holder]:
    """The processes that hold a lock (fcntl, as apt and dpkg take it, or flock) on one of
    `paths`, from the kernel's table of locks, in the order of `paths`."""
    ids: dict[tuple[int, int, int], Path] = {}
    for path in paths:
        try:
            st = path.stat()
        except FileNotFoundError:
            continue  # no one has locked it yet
        ids[os.major(st.st_dev), os.minor(st.st_dev), st.st_ino] = path
    found = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields:
            continue  # a process waiting for that lock, not holding it
        major, minor, inode = fields[5].split(":")
        locked = ids.get((int(major, 16), int(minor, 16), int(inode)))
        if locked is not None:
            found.append(Holder(locked, int(fields[4])))
    return sorted(found, key=lambda h: list(paths).index(h.path))


def wait_for(paths: Sequence[Path], deadline: float, started: float) -> None:
    """Return once no one holds a lock on `paths`; raise LockHeld, naming the holder, if one
    still does at `deadline` (time.monotonic())."""
    while held := holders(paths):
        if time.monotonic() >= deadline:
            first = held[0]
            raise LockHeld(f"{first.path} is still held after {deadline - started:g} s by "
                           f"process {first.pid}: {first.command} (another apt or dpkg at "
                           "work: on a fresh machine, its automatic updates; let it finish, "
                           "then run the tests again)")
        time.sleep(POLL_S)


def apt_get(*args: str, locks: Sequence[Path] = LOCKS, timeout: float = WAIT_S) -> str:
    """`apt-get ARGS` (noninteractive) once `locks` are free, waiting up to `timeout`
    seconds for them; its output. A lock taken between the wait and apt-get's own locking
    (automatic updates run one apt-get after another) fails apt-get at once: it is waited
    for again, then apt-get retried, within the same bound. LockHeld when they stay held,
    AssertionError when apt-get fails."""
    argv = ["apt-get", *args]
    started = time.monotonic()
    while True:
        try:
            wait_for(locks, started + timeout, started)
        except LockHeld as error:
            raise LockHeld(f"{shlex.join(argv)}: {error}") from None
        left = math.ceil(max(1.0, started + timeout - time.monotonic()))
        run = ["apt-get", "-o", f"DPkg::Lock::Timeout={left}", *args]
        done = subprocess.run(run, capture_output=True, text=True, timeout=left + RUN_S,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive",
                                   "LC_ALL": "C"})  # (apt's messages untranslated)
        if done.returncode == 0:
            return done.stdout
        lost = "Could not get lock" in done.stderr and time.monotonic() < started + timeout
        assert lost, f"{shlex.join(run)}: {done.returncode}\n{done.stderr[-3000:]}"
        time.sleep(POLL_S)  # (its holder is at work: the next wait waits for it)
