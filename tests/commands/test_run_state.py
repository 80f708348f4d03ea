"""`serve --state` and `run --state`: real replicas (`serve` processes, workers) sharing a
real redis-server, driven by the official openai client; `run`'s verdict over all of them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import redis

from replay_server.index import file as index_file
from replay_server.index.loading import load
from tests.parts import redis_server
from tests.support import (
    CLI,
    MODEL,
    ROOT,
    Spawned,
    chat_record,
    chat_response,
    spawn,
    user,
    wait_for,
    write_jsonl,
)

pytestmark = [pytest.mark.http, pytest.mark.slow]
PREFIX = "replay-server:test"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with a repeats prompt (5 samples, one per n=1 call) and a greedy one."""
    folder = tmp_path_factory.mktemp("state")
    path = write_jsonl(folder / "run.jsonl", [
        chat_record("q", chat_response("1", "2", "3", "4", "5"), line=1),
        chat_record("greedy", chat_response("g"), line=2)])
    index_file.write(load([path], progress=False), folder / "run.idx")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[redis_server.RedisServer]:
    with redis_server.running(tmp_path) as server:
        yield server


def ask(url: str, text: str = "q") -> str:
    with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as client:
        reply = client.chat.completions.create(model=MODEL, messages=user(text))
        return str(reply.choices[0].message.content)


def test_serve_with_workers_shares_the_cursor(saved: Path,
                                              store: redis_server.RedisServer) -> None:
    """A repeats run, refused with --workers 2 alone, is served by two workers sharing
    the state: each saved sample once, in saved order, then exhausted."""
    index = str(saved.with_suffix(".idx"))
    with spawn("serve", index, "--workers", "2", "--state", store.url,
               "--log-level", "warning") as server:
        assert [ask(server.url) for _ in range(5)] == ["1", "2", "3", "4", "5"]
        with pytest.raises(openai.BadRequestError) as caught:
            ask(server.url)
        assert caught.value.code == "replay_exhausted"
        status = httpx.get(f"{server.base}/replay/status").json()
        assert status["totals"]["hits"] == 5 and status["totals"]["unused_samples"] == 1
        assert server.stop(signal.SIGTERM) == 0


SCRIPT = """
import os, openai
here = openai.OpenAI(max_retries=0)
there = openai.OpenAI(base_url=os.environ["OTHER_URL"], max_retries=0)
for i, text in enumerate(os.environ["ASK"].split(",")):
    client = (here, there)[i % 2]
    try:
        r = client.chat.completions.create(model="test/model",
                                           messages=[{"role": "user", "content": text}])
        print(r.choices[0].message.content)
    except openai.APIStatusError as e:  # (a harness that swallows errors)
        print("error", e.status_code)
"""


@pytest.fixture
def replicas(saved: Path, store: redis_server.RedisServer) -> Iterator[list[Spawned]]:
    with spawn("serve", str(saved), "--state", store.url, "--state-prefix", PREFIX) as a, \
            spawn("serve", str(saved), "--state", store.url, "--state-prefix", PREFIX) as b:
        yield [a, b]


def run_against(saved: Path, store: redis_server.RedisServer, replicas: list[Spawned],
                asks: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """`run --state --server A` with a COMMAND that asks A and B in turn."""
    env = {**os.environ, "OTHER_URL": replicas[1].url, "ASK": asks}
    return subprocess.run(
        [*CLI, "run", str(saved), "--state", store.url, "--state-prefix", PREFIX,
         "--server", replicas[0].base, *extra, "--", sys.executable, "-c", SCRIPT],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)


@pytest.mark.parametrize(("asks", "status", "said"), [
    ("q,q,q,q,q,greedy", 0, "every request was answered from the saved run"),
    ("q,never saved,q,q,q,q,greedy", 3, "1 distinct request(s) got no saved generation"),
    ("q,q,q,q,greedy", 4, "1 saved sample(s) were never asked for"),
])
def test_run_s_verdict_covers_every_replica(saved: Path, store: redis_server.RedisServer,
                                            replicas: list[Spawned], asks: str, status: int,
                                            said: str) -> None:
    result = run_against(saved, store, replicas, asks)
    assert result.returncode == status, result.stderr
    assert said in result.stderr
    served = [line for line in result.stdout.split() if line.isdigit()]
    assert sorted(served) == sorted(set(served))  # (each sample once, across replicas)


def test_a_second_run_on_the_same_prefix_is_refused(
        saved: Path, store: redis_server.RedisServer, replicas: list[Spawned]) -> None:
    with redis.Redis.from_url(store.url) as client:
        client.set(f"{PREFIX}:run", 99, px=60_000)
    result = run_against(saved, store, replicas, "q")
    assert result.returncode == 2, result.stderr
    assert "another `replay-server run` (replica 99) is rescoring this run" in result.stderr
    # what to do, for several CI jobs sharing one store: wait, or a prefix of their own
    assert "wait until it ends, or give this rescoring a --state-prefix of its own" \
        in result.stderr


@pytest.mark.parametrize("options", [["--state-prefix", "replay-server:another"], []])
def test_run_refuses_a_server_whose_replicas_share_another_state_or_none(
        saved: Path, store: redis_server.RedisServer, tmp_path: Path,
        options: list[str]) -> None:
    """Behind --server, a replica that keeps its state under another prefix (another run's
    shape, another --state-prefix) or in its own process would answer requests whose
    misses `run` never sees: refused before COMMAND runs (exit 2), naming both."""
    state = ["--state", store.url, *options] if options else []
    marker = tmp_path / "ran"
    with spawn("serve", str(saved), *state) as elsewhere:
        result = subprocess.run(
            [*CLI, "run", str(saved), "--state", store.url, "--state-prefix", PREFIX,
             "--server", elsewhere.base, "--", "touch", str(marker)],
            capture_output=True, text=True, cwd=ROOT, timeout=120)
        process = httpx.get(f"{elsewhere.base}/replay/status").json()["process"]
    assert result.returncode == 2, result.stderr
    assert not marker.exists()
    said = "replay-server:another" if options else "no shared state (no --state)"
    assert f"answers from {said}, not {PREFIX}" in result.stderr, result.stderr
    assert f"the replica on {process['host']} (pid {process['pid']})" in result.stderr


def test_run_refuses_replicas_that_lost_the_state(
        saved: Path, store: redis_server.RedisServer, replicas: list[Spawned],
        tmp_path: Path) -> None:
    """The store restarted empty: the replicas know (their heartbeat finds the run gone)
    and refuse every replay; `run` says so before COMMAND runs, rather than after its
    first request."""
    store.restart()
    wait_for(lambda: httpx.get(f"{replicas[0].base}/replay/status").json()["state"]["lost"],
             timeout=10)
    marker = tmp_path / "ran"
    result = subprocess.run(
        [*CLI, "run", str(saved), "--state", store.url, "--state-prefix", PREFIX,
         "--server", replicas[0].base, "--", "touch", str(marker)],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2, result.stderr
    assert not marker.exists()
    assert "has lost the shared state" in result.stderr and "restart the replicas" in \
        result.stderr, result.stderr


def test_server_without_state_is_a_usage_error(saved: Path) -> None:
    result = subprocess.run([*CLI, "run", str(saved), "--server", "http://127.0.0.1:9",
                             "--", "true"], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)
    assert result.returncode == 2 and "--server needs --state" in result.stderr


def test_a_replica_whose_store_is_gone_answers_503_and_counts_it(
        saved: Path, store: redis_server.RedisServer) -> None:
    with spawn("serve", str(saved), "--state", store.url, "--log-level", "error") as server:
        assert ask(server.url) == "1"
        store.stop()
        response = httpx.post(f"{server.url}/chat/completions",
                              json={"model": MODEL, "messages": user("q")}, timeout=30)
        assert response.status_code == 503, response.text
        assert response.headers["x-should-retry"] == "false"
        error = response.json()["error"]
        assert error["code"] == "replay_state_unavailable"
        assert store.url.removeprefix("redis://") in error["message"]
        greedy = httpx.post(f"{server.url}/chat/completions",  # (met down: every request)
                            json={"model": MODEL, "messages": user("greedy")}, timeout=30)
        assert greedy.status_code == 503


KILL = """
import os, signal, openai
client = openai.OpenAI(max_retries=0)
print(client.chat.completions.create(model="test/model",
      messages=[{"role": "user", "content": "greedy"}]).choices[0].message.content)
os.kill(int(os.environ["STORE_PID"]), signal.SIGKILL)
os.waitpid  # (the store is the test's child: it reaps it)
try:
    client.chat.completions.create(model="test/model",
                                   messages=[{"role": "user", "content": "q"}])
except openai.APIStatusError as e:
    print("error", e.status_code)
"""


def test_run_fails_when_the_store_goes_away(saved: Path,
                                            store: redis_server.RedisServer) -> None:
    env = {**os.environ, "STORE_PID": str(store.proc.pid)}
    result = subprocess.run(
        [*CLI, "run", str(saved), "--state", store.url, "--log-level", "error", "--",
         sys.executable, "-c", KILL], capture_output=True, text=True, cwd=ROOT,
        timeout=120, env=env)
    assert "error 503" in result.stdout, result.stderr
    assert result.returncode == 3, result.stderr
    assert "the shared state could not be read at the end" in result.stderr


DIES = """
import os, signal, socket, time, openai
from urllib.parse import urlsplit
other = urlsplit(os.environ["OTHER_URL"])
cut = socket.create_connection((other.hostname, other.port))
cut.sendall(b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\n"
            b"Content-Type: application/json\\r\\nContent-Length: 100\\r\\n\\r\\n{")
time.sleep(0.5)  # (the request has begun there, and said so)
os.killpg(int(os.environ["OTHER_PID"]), signal.SIGKILL)
client = openai.OpenAI(max_retries=0)
for text in ["q"] * 5 + ["greedy"]:
    client.chat.completions.create(model="test/model",
                                   messages=[{"role": "user", "content": text}])
time.sleep(6)  # (its heartbeat expires: it is dead)
cut.close()
"""


def test_a_replica_killed_with_a_request_in_flight_is_said_and_fails_nothing_by_itself(
        saved: Path, store: redis_server.RedisServer, replicas: list[Spawned]) -> None:
    env = {**os.environ, "OTHER_URL": replicas[1].url, "OTHER_PID": str(replicas[1].proc.pid)}
    result = subprocess.run(
        [*CLI, "run", str(saved), "--state", store.url, "--state-prefix", PREFIX,
         "--server", replicas[0].base, "--", sys.executable, "-c", DIES],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert re.search(r"1 request\(s\) in flight on replica \d+ when it died", result.stderr)


def test_run_s_own_server_joins_the_shared_state(
        saved: Path, store: redis_server.RedisServer, replicas: list[Spawned]) -> None:
    """`run --state` without --server: its own server is one more replica; COMMAND asks
    it and another replica in turn."""
    env = {**os.environ, "OTHER_URL": replicas[1].url, "ASK": "q,q,q,q,q,greedy"}
    result = subprocess.run(
        [*CLI, "run", str(saved), "--state", store.url, "--state-prefix", PREFIX, "--",
         sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT,
        timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["1", "2", "3", "4", "5", "g"]


def test_a_request_lost_with_its_replica_fails_the_run_under_allow_unused(
        saved: Path, store: redis_server.RedisServer, replicas: list[Spawned]) -> None:
    """A request in flight on a replica that died is excused only because a client that
    did not resend it leaves its sample unused (exit 4); under --allow-unused nothing
    would catch that, and the run would pass with an item that got no answer."""
    env = {**os.environ, "OTHER_URL": replicas[1].url, "OTHER_PID": str(replicas[1].proc.pid)}
    never_resent = DIES.replace('["q"] * 5 + ["greedy"]', '["q"] * 5')
    result = subprocess.run(
        [*CLI, "run", str(saved), "--state", store.url, "--state-prefix", PREFIX,
         "--server", replicas[0].base, "--allow-unused", "--", sys.executable, "-c",
         never_resent], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert re.search(r"1 request\(s\) in flight on replica \d+ when it died", result.stderr)
    assert result.returncode == 3, result.stderr
