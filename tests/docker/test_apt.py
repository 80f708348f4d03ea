"""apt-get waits for apt's locks (tests/docker/apt.py): a real apt-get, the lock held by a
process of the test's own, on a lock file of the test's own or, briefly, on the machine's."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.docker import apt
from tests.docker.apt import LOCKS, LockHeld, apt_get

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not shutil.which("apt-get"), reason="needs apt-get")]

# Holds an fcntl lock on a file, as apt and dpkg do, for some seconds, then exits.
HOLD = """\
import fcntl, sys, time
with open(sys.argv[1], "a") as f:
    fcntl.lockf(f, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@contextmanager
def held(path: Path, seconds: float) -> Iterator[subprocess.Popen[str]]:
    """A process of its own holding `path`'s lock for `seconds`; killed whatever happened."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def own_lists(tmp_path: Path) -> list[str]:
    """`apt-get update` options that keep it in `tmp_path`: no sources (no network), its own
    lists folder (whose `lock` is the lists lock it takes) and cache; the machine's apt state
    is not touched."""
    for folder in ("lists/partial", "cache/archives/partial", "sources.list.d"):
        (tmp_path / folder).mkdir(parents=True)
    return ["-o", f"Dir::State::Lists={tmp_path / 'lists'}", "-o", "Dir::Etc::SourceList=/dev/null",
            "-o", f"Dir::Etc::SourceParts={tmp_path / 'sources.list.d'}",
            "-o", f"Dir::Cache={tmp_path / 'cache'}"]


def test_update_waits_for_a_held_lists_lock_then_runs(tmp_path: Path) -> None:
    """apt-get's own DPkg::Lock::Timeout waits for dpkg's locks only: `apt-get update` fails
    at once on a held lists lock (the machine's automatic updates hold it first)."""
    options = own_lists(tmp_path)
    lock = tmp_path / "lists/lock"
    with held(lock, 1.0) as holder:
        apt_get(*options, "update", "-qq", locks=[lock], timeout=60)
        assert holder.wait(10) == 0  # it held the lock its whole second, then let it go


def test_a_lock_taken_between_the_wait_and_apt_get_is_waited_for_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Automatic updates run `apt-get update`, let the locks go, then take them again (a
    new apt-get, unattended-upgrade): one taken in the moment between the wait and
    apt-get's own locking failed apt-get at once. It is waited for again, then retried."""
    options = own_lists(tmp_path)
    lock = tmp_path / "lists/lock"
    real_wait = apt.wait_for
    with ExitStack() as stack:
        taken: list[subprocess.Popen[str]] = []

        def then_taken(paths: Sequence[Path], deadline: float, started: float) -> None:
            real_wait(paths, deadline, started)
            if not taken:  # another apt takes the lock right after the first wait
                taken.append(stack.enter_context(held(lock, 1.0)))

        monkeypatch.setattr(apt, "wait_for", then_taken)
        apt_get(*options, "update", "-qq", locks=[lock], timeout=60)
        assert taken and taken[0].wait(10) == 0


def test_a_lock_held_past_the_bound_names_its_holder(tmp_path: Path) -> None:
    options = own_lists(tmp_path)
    lock = tmp_path / "lists/lock"
    with held(lock, 60) as holder:
        with pytest.raises(LockHeld) as raised:
            apt_get(*options, "update", "-qq", locks=[lock], timeout=0.5)
        assert holder.poll() is None
    message = str(raised.value)
    assert f"{lock} is still held after 0.5 s by process {holder.pid}: " in message
    assert shlex.join([sys.executable, "-c", HOLD, str(lock), "60"]) in message
    assert message.startswith(f"apt-get {shlex.join(options)} update -qq: ")


@pytest.mark.skipif(os.geteuid() != 0, reason="apt-get takes dpkg's lock as root only")
def test_apt_get_waits_for_the_machine_s_dpkg_lock() -> None:
    """The machine's real dpkg frontend lock, held for one second: `apt-get check` (which
    takes it, and changes nothing) waits, then runs."""
    frontend = LOCKS[0]
    assert frontend == Path("/var/lib/dpkg/lock-frontend")
    with held(frontend, 1.0) as holder:
        apt_get("check", "-qq")
        assert holder.wait(10) == 0
