"""commands/command.py: COMMAND under `run`, stopped whole. A real `replay-server run` gets a
real signal (or stops COMMAND itself) while COMMAND's children run, one under a real
`timeout` (which moves it to a process group of its own) and one orphan in a session of its
own; afterwards none of them is alive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from replay_server.commands.command import Command, processes

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a subreaper and /proc: Linux")
ROOT = Path(__file__).parents[2]
# writes its pid to DIR/NAME, then waits to be stopped
CHILD = """
import os, sys, time
open(os.path.join(sys.argv[1], sys.argv[2]), "w").write(str(os.getpid()))
time.sleep(100)
"""
# COMMAND: its pid, a child under `timeout` (its own process group), an orphan that left
# COMMAND's session (its parent exits at once), with "miss" a miss; then "ready", and waits
COMMAND = """
import os, subprocess, sys, time
where, child = sys.argv[1], [sys.executable, "-c", sys.argv[2], sys.argv[1]]
open(os.path.join(where, "command"), "w").write(str(os.getpid()))
def started(name):
    while not os.path.exists(os.path.join(where, name)):
        time.sleep(0.02)
timeout = subprocess.Popen(["timeout", "100", *child, "under-timeout"])
open(os.path.join(where, "timeout"), "w").write(str(timeout.pid))
subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen(sys.argv[1:], "
                "start_new_session=True)", *child, "orphan"], check=True)
started("under-timeout"); started("orphan")
if sys.argv[3:] == ["miss"]:
    import openai
    try:
        openai.OpenAI().chat.completions.create(model="demo/tiny-chat-model", messages=[
            {"role": "user", "content": "Name a colour"}])
    except openai.BadRequestError:
        pass
open(os.path.join(where, "ready"), "w").close()
time.sleep(100)
"""
NAMES = ("command", "timeout", "under-timeout", "orphan")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def started_pids(where: Path, run: subprocess.Popen[str], *more: str) -> dict[str, int]:
    """The pids COMMAND wrote, once they are there (and the files named `more`)."""
    deadline = time.monotonic() + 60
    while not all((where / name).exists() for name in (*NAMES, *more)):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    time.sleep(0.05)  # (the last write ended)
    return {name: int((where / name).read_text()) for name in NAMES}


@pytest.fixture
def stray() -> Iterator[list[int]]:
    """Pids a test started; whatever of them is still alive at the end is killed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def run(where: Path, *options: str, miss: bool = False) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "replay_server", "run", "examples/", "--allow-unused",
            "--log-level", "warning", *options, "--", sys.executable, "-c", COMMAND,
            str(where), CHILD, *(["miss"] if miss else [])]
    return subprocess.Popen(argv, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def ended(run: subprocess.Popen[str]) -> tuple[int, str]:
    """Its exit status and stderr (killed, with its process group, after 60 s)."""
    try:
        _, err = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        _, err = run.communicate()
        raise AssertionError(f"run did not end:\n{err}") from None
    return run.returncode, err


@pytest.mark.slow
@pytest.mark.http
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda s: s.name)
def test_a_signal_to_run_stops_everything_command_started_then_run_reports(
        tmp_path: Path, stray: list[int], sig: signal.Signals) -> None:
    process = run(tmp_path)
    stray.append(process.pid)
    pids = started_pids(tmp_path, process, "ready")
    stray.extend(pids.values())
    process.send_signal(sig)
    status, err = ended(process)
    assert {name for name, pid in pids.items() if alive(pid)} == set()
    assert status == 128 + sig, err  # the conventional status: no miss outranks it
    assert f"replay-server run: stopping COMMAND and everything it started on {sig.name}" \
        in err
    assert "replay report:" in err
    assert f"replay-server run: COMMAND was stopped on {sig.name}: exit status " \
        f"{128 + sig}" in err


@pytest.mark.slow
@pytest.mark.http
def test_stop_on_miss_stops_everything_command_started(tmp_path: Path,
                                                         stray: list[int]) -> None:
    process = run(tmp_path, "--stop-on-miss", miss=True)
    stray.append(process.pid)
    pids = started_pids(tmp_path, process)
    stray.extend(pids.values())
    status, err = ended(process)
    assert {name for name, pid in pids.items() if alive(pid)} == set()
    assert status == 3, err
    assert "stopped COMMAND at the first miss (--stop-on-miss)" in err


@pytest.mark.slow
@pytest.mark.http
def test_a_miss_before_the_signal_outranks_its_status(tmp_path: Path,
                                                       stray: list[int]) -> None:
    process = run(tmp_path, miss=True)
    stray.append(process.pid)
    pids = started_pids(tmp_path, process, "ready")
    stray.extend(pids.values())
    process.send_signal(signal.SIGTERM)
    status, err = ended(process)
    assert {name for name, pid in pids.items() if alive(pid)} == set()
    assert status == 3, err
    assert "COMMAND was stopped on SIGTERM: exit status 143" in err


@pytest.mark.slow
@pytest.mark.http
def test_a_second_signal_kills_what_ignores_the_first(tmp_path: Path,
                                                      stray: list[int]) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
        f"open({str(tmp_path / 'ready')!r}, 'w').close(); time.sleep(100)"
    process = subprocess.Popen(
        [sys.executable, "-m", "replay_server", "run", "examples/", "--log-level", "warning",
         "--", sys.executable, "-c", stubborn], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    stray.append(process.pid)
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    assert process.stderr is not None
    said = ""
    while "stopping COMMAND" not in said:  # (the first signal's stop has begun)
        line = process.stderr.readline()
        assert line, said
        said += line
    process.send_signal(signal.SIGINT)
    status, err = ended(process)
    assert status == 143, said + err  # the first signal's
    assert "killing what is left of COMMAND at once (on SIGINT while stopping it)" in err


@pytest.mark.slow
@pytest.mark.http
def test_a_signal_to_run_whose_output_is_gone_still_stops_everything(
        tmp_path: Path, stray: list[int]) -> None:
    """Ctrl-C to `run ... 2>&1 | tee LOG` ends tee too, and a terminal that closes (SIGHUP)
    takes run's stderr with it: a line run cannot print must not end run, which would
    leave what ignores SIGTERM running for ever (it did: run exited 1, no SIGKILL came)."""
    ready = tmp_path / "ready"
    stubborn = "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
        f"open({str(ready)!r}, 'w').write(str(os.getpid())); time.sleep(100)"
    process = subprocess.Popen(
        [sys.executable, "-m", "replay_server", "run", "examples/", "--log-level", "warning",
         "--", sys.executable, "-c", stubborn], cwd=ROOT, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    stray.append(process.pid)
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text()):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    stray.append(int(ready.read_text()))
    assert process.stderr is not None
    process.stderr.close()  # (tee ended: run's next line meets a broken pipe)
    process.send_signal(signal.SIGINT)
    try:
        status = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    assert status == 130
    assert not alive(stray[-1])


def test_the_process_table_reads_a_name_of_spaces_and_parentheses(tmp_path: Path) -> None:
    odd = tmp_path / "a) b (c"
    odd.symlink_to(Path(sys.executable))
    with subprocess.Popen([odd, "-c", "import time; time.sleep(30)"]) as child:
        try:
            assert processes()[child.pid] == (os.getpid(), False)
        finally:
            child.kill()
    assert child.pid not in processes()


def test_a_command_is_stopped_whole_with_its_own_signal_status(tmp_path: Path) -> None:
    command = Command()
    command.start([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen("
                   "[sys.executable, '-c', 'import time; time.sleep(30)'], "
                   "start_new_session=True); time.sleep(30)"], dict(os.environ))
    assert command.proc is not None
    while len(members := command.members()) < 2:
        time.sleep(0.01)
    assert command.proc.pid in members
    assert command.stop("at the first miss (--stop-on-miss)")
    assert not command.stop("at the first miss (--stop-on-miss)")  # once
    assert command.wait() == 128 + signal.SIGTERM  # (COMMAND's own, as a shell says it)
    assert command.members() == [] and not any(alive(pid) for pid in members)


def test_a_command_stopped_before_it_starts_never_starts(tmp_path: Path) -> None:
    command = Command()
    assert command.stop("on SIGTERM", signal.SIGTERM)
    command.start([sys.executable, "-c", f"open({str(tmp_path / 'ran')!r}, 'w')"],
                  dict(os.environ))
    assert command.wait() == 143 and command.proc is None
    assert not (tmp_path / "ran").exists()
