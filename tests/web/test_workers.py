"""`serve --workers 2`: processes of their own on uvicorn's public `Server`, guarded as one
server is, stopped together, and loud when one dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import openai
import pytest

from replay_server.index import file as index_file
from replay_server.index.loading import load
from tests.support import Spawned, chat_record, chat_response, spawn, user, wait_for, write_jsonl

pytestmark = pytest.mark.http


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("workers")
    saved = write_jsonl(folder / "run.jsonl", [
        chat_record(f"q{i}", chat_response(f"a{i}"), line=i) for i in range(20)])
    index_file.write(load([saved], progress=False), folder / "run.idx")
    return folder / "run.idx"


def workers(server: Spawned) -> list[int]:
    """The worker processes of `server`."""
    found = subprocess.run(["pgrep", "-P", str(server.proc.pid)], capture_output=True,
                           text=True).stdout.split()

    def spawned(pid: str) -> bool:
        try:
            return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False

    return [int(pid) for pid in found if spawned(pid)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def answering(server: Spawned) -> list[int]:
    """Once both workers answer: their pids."""
    wait_for(lambda: len(workers(server)) == 2, timeout=30)
    with openai.OpenAI(base_url=server.url, api_key="x") as client:
        for i in range(20):
            r = client.chat.completions.create(model="test/model", messages=user(f"q{i}"))
            assert r.choices[0].message.content == f"a{i}"
    return workers(server)


@pytest.mark.slow
def test_sigterm_stops_every_worker_and_exits_0(index: Path) -> None:
    with spawn("serve", str(index), "--workers", "2", "--log-level", "warning") as server:
        pids = answering(server)
        assert server.stop(signal.SIGTERM) == 0
    assert not any(alive(pid) for pid in pids)


@pytest.mark.slow
def test_a_worker_cuts_off_a_trickling_client(index: Path) -> None:
    with spawn("serve", str(index), "--workers", "2", "--read-timeout", "1") as server:
        answering(server)
        host, port = server.base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            start = time.monotonic()
            assert sock.recv(100) == b""
            assert time.monotonic() - start < 3


@pytest.mark.slow
def test_a_worker_that_dies_stops_the_server_loudly(index: Path) -> None:
    with spawn("serve", str(index), "--workers", "2", "--log-level", "warning") as server:
        first, second = answering(server)
        os.kill(first, signal.SIGKILL)
        assert server.wait(60) == 2, server.output
    assert f"pid {first}) exited with status -9" in server.output
    assert not alive(second)


@pytest.mark.slow
def test_workers_stop_when_the_server_is_killed(index: Path) -> None:
    # SIGKILL leaves the parent no way to stop them: each worker watches its parent
    with spawn("serve", str(index), "--workers", "2", "--log-level", "warning") as server:
        pids = answering(server)
        server.proc.kill()
        server.proc.wait()
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout=40)
