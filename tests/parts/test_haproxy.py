"""The balancer part (tests/parts/haproxy.py): Debian's haproxy, from docker/haproxy.cfg, in
front of three plain `replay-server serve examples/` processes, with the official openai
client (no retries of its own: whatever haproxy does not save fails the test)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import openai
import pytest

from tests.parts.haproxy import CONFIG, Fleet, local_config, replicas

SERVE = ["serve", "examples/"]
QUESTION = [{"role": "system", "content": "Answer with a number only."},
            {"role": "user", "content": "What is 2+2?"}]
# An `option httplog` line: the server that answered, the status, and (after the
# termination state) "actconn/feconn/beconn/srv_conn/retries", where a redispatched
# request's retries are prefixed with "+".
LOGGED = re.compile(r'\] replay replicas/(\S+) \S+ (\d+) .* [-\w]{4} \d+/\d+/\d+/\d+/(\+?\d+) '
                    r'\S+ "POST /v1/chat/completions ')


def ask(client: openai.OpenAI) -> tuple[str | None, str]:
    """The answer to the example's question, and the saved line it came from."""
    raw = client.chat.completions.with_raw_response.create(
        model="demo/tiny-chat-model", messages=QUESTION, max_tokens=256,  # type: ignore[arg-type]
        temperature=0.0)
    return raw.parse().choices[0].message.content, raw.headers["x-replay-source"]


def logged(fleet: Fleet) -> list[tuple[str, ...]]:
    """(server, status, retries) of each chat request haproxy logged, in order."""
    return [found.groups() for line in fleet.balancer.lines() if (found := LOGGED.search(line))]


def hits(fleet: Fleet) -> list[int]:
    """Each live replica's own count of answered prompts (GET /replay/status)."""
    counts = []
    for replica in fleet.replicas:
        if replica.proc.poll() is None:
            status = httpx.get(f"{replica.base}/replay/status", timeout=10).json()
            counts.append(status["totals"]["hits"])
    return counts


@pytest.mark.slow
def test_round_robin_over_the_replicas(tmp_path: Path) -> None:
    with replicas(SERVE, 3, tmp_path) as fleet, openai.OpenAI(
            base_url=fleet.url, api_key="replay", max_retries=0) as client:
        answers = [ask(client) for _ in range(6)]
        assert answers == [("4", "examples/demo-run.jsonl:1 (demo-1)")] * 6
        assert hits(fleet) == [2, 2, 2]  # one request each, in turn
        assert logged(fleet) == [(f"replica{n}", "200", "0") for n in (1, 2, 3, 1, 2, 3)]


@pytest.mark.slow
def test_a_killed_replica_s_requests_go_to_the_others(tmp_path: Path) -> None:
    """With its health checks off, haproxy keeps giving the killed replica its turn: every
    such request fails to connect, and retry-on conn-failure with redispatch sends it to a
    live replica; the client sees no error."""
    with replicas(SERVE, 3, tmp_path) as fleet, openai.OpenAI(
            base_url=fleet.url, api_key="replay", max_retries=0) as client:
        before = [ask(client) for _ in range(3)]
        fleet.balancer.checks_off(1)
        fleet.kill(1)
        after = [ask(client) for _ in range(9)]
        assert before + after == [("4", "examples/demo-run.jsonl:1 (demo-1)")] * 12
        assert sum(hits(fleet)) == 11  # the 12 answers, less the killed replica's one
        requests = logged(fleet)
        assert len(requests) == 12 and {status for _, status, _ in requests} == {"200"}
        # its turns (a third of the nine at least; round robin resumes after the replica
        # that took one on), each answered by another replica at the first retry, which is
        # redispatched: "+1"
        retries = [retries for _, _, retries in requests[3:]]
        assert set(retries) == {"0", "+1"} and retries.count("+1") >= 3, requests
        assert {server for server, _, _ in requests[3:]} == {"replica1", "replica3"}


def test_the_local_config_changes_only_where_it_listens_and_whom_it_balances(
        tmp_path: Path) -> None:
    source = CONFIG.read_text()
    local = local_config(source, 7, [1001, 1002], tmp_path / "admin.sock")
    removed = [line for line in source.splitlines() if line not in local.splitlines()]
    added = [line for line in local.splitlines() if line not in source.splitlines()]
    assert [line.split()[0] for line in removed] == ["bind", "server-template"]
    assert [line.strip() for line in added] == [
        f"stats socket {tmp_path / 'admin.sock'} level admin", "bind fd@7",
        "server replica1 127.0.0.1:1001", "server replica2 127.0.0.1:1002"]
