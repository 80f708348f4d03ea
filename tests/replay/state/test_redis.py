"""replay/state/redis.py: replicas sharing one real redis-server hand out each saved sample
once, give back what was never delivered, start over together, free a dead replica's
places, and count every replica's requests in one journal."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from replay_server import errors
from replay_server.index.samples import Rules
from replay_server.paths import CHAT_PATH
from replay_server.replay.replayer import Replayer
from replay_server.replay.state import Busy, shared
from replay_server.replay.state import redis as shared_state
from replay_server.replay.state.journal import shape_digest
from replay_server.replay.state.redis import RedisState
from replay_server.replay.stats import Stats
from replay_server.saved.record import Record
from replay_server.settings import Settings
from replay_server.web.app import create_app
from replay_server.wire.credentials import shown
from tests.parts import redis_server
from tests.support import MODEL, build, chat_record, chat_response, running, user

REPEATS = [chat_record("q", chat_response("1", "2", "3", "4", "5"))]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[redis_server.RedisServer]:
    with redis_server.running(tmp_path) as server:
        yield server


@contextmanager
def replicas(url: str, records: list[Record], n: int = 2) -> Iterator[list[Replayer]]:
    """`n` replay services on one store, each with its own index, as processes have."""
    with ExitStack() as stack:
        found = []
        for _ in range(n):
            index = build(records)
            state = shared(index, url, url)
            stack.callback(state.close)
            found.append(Replayer(index, Rules(), state=state))
        yield found


def counted(*found: Replayer) -> Stats:
    """What the first replica counts once every replica sent its events (they go within
    milliseconds, from a background thread: here, at once)."""
    for r in reversed(found):
        r.current()
    return found[0].current()


def kill(r: Replayer, url: str) -> None:
    """What a replica's death leaves: its heartbeat gone (it beats no more: BEAT_S)."""
    state = r.state
    assert isinstance(state, RedisState)
    with redis.Redis.from_url(url) as client:
        client.delete(state.key("alive", state.replica))


def ask(r: Replayer, text: str = "q") -> str:
    body = r.handle(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": user(text)})).body
    return str(orjson.loads(body)["choices"][0]["message"]["content"])


def take(r: Replayer, text: str = "q") -> Any:
    return r.take(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": user(text)}),
                  patient=False)


def test_alternating_replicas_get_the_samples_once_each_in_saved_order(
        store: redis_server.RedisServer) -> None:
    with replicas(store.url, REPEATS) as (a, b):
        assert [ask(r) for r in (a, b, a, b, a)] == ["1", "2", "3", "4", "5"]
        with pytest.raises(errors.Exhausted):
            ask(b)
        for stats in (counted(a, b), counted(b, a)):  # each counts every replica's requests
            assert stats.answered == 5 and stats.unused(MODEL) == 0
            assert stats.counts[MODEL]["replay_exhausted"] == 1


def test_concurrent_requests_on_two_replicas_get_each_sample_once(
        store: redis_server.RedisServer) -> None:
    saved = [str(i) for i in range(40)]
    records = [chat_record("q", chat_response(*saved))]
    got: list[str] = []
    with replicas(store.url, records) as pair:
        def work(r: Replayer) -> None:
            for _ in range(20):
                got.append(ask(r))

        threads = [threading.Thread(target=work, args=(pair[i % 2],)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(got, key=int) == saved
        assert counted(*pair).unused(MODEL) == 0


def test_an_undelivered_answer_gives_its_sample_back_to_any_replica(
        store: redis_server.RedisServer) -> None:
    with replicas(store.url, REPEATS) as (a, b):
        first, second = take(a), take(b)
        a.settle(first, False)
        b.settle(second, True)
        assert ask(b) == "1" and ask(a) == "3"
        assert counted(b, a).undelivered == 1


def test_a_reset_on_one_replica_starts_every_replica_over(
        store: redis_server.RedisServer) -> None:
    with replicas(store.url, REPEATS) as (a, b):
        assert [ask(a), ask(b)] == ["1", "2"]
        before = take(b)
        counted(a, b)  # (every hit before the reset has reached the journal)
        a.reset()
        assert [ask(b), ask(a)] == ["1", "2"]
        b.settle(before, False)  # (taken before the reset: frees nothing after it)
        assert ask(b) == "3"
        assert counted(b, a).answered == 3  # (counts start over too)


def test_a_dead_replica_s_pending_sample_is_served_by_another(
        store: redis_server.RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica that took a sample and died before its answer left (its heartbeat
    expired) loses it to none: another replica serves it."""
    monkeypatch.setattr(shared_state, "BEAT_S", 3600.0)  # (the dead one beats no more)
    with replicas(store.url, REPEATS) as (a, b):
        take(a)  # "1", on its way when a dies
        kill(a, store.url)
        assert ask(b) == "1"


def test_a_sample_a_dead_replica_had_on_its_way_fails_the_verdict(
        store: redis_server.RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The request whose sample died with its replica got no answer there: if its client
    resent it, the resend may have had a later sample (the next, while the dead replica
    still looked alive), and another request the given-back one: the saved order, quietly
    changed. So the sample given back is counted as an answer never delivered (`run`: 3),
    whoever finds the replica dead."""
    monkeypatch.setattr(shared_state, "BEAT_S", 3600.0)
    with replicas(store.url, REPEATS) as (a, b):
        take(a)
        kill(a, store.url)
        assert ask(b) == "1"
        assert counted(b, a).undelivered == 1


def test_a_replica_whose_heartbeat_lapsed_before_it_committed_fails_loudly(
        store: redis_server.RedisServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(shared_state, "BEAT_S", 3600.0)
    with replicas(store.url, REPEATS) as (a, b):
        late = take(a)
        kill(a, store.url)
        assert ask(b) == "1"  # (given away: a's "1" goes out too)
        a.settle(late, True)
        stats = counted(b, a)  # (its commit says so, and so does the journal: "1" twice)
        assert {f.first["code"] for f in stats.failures.values()} == {"replay_state_lost"}
        assert any(r.levelno == logging.ERROR and "heartbeat lapsed" in r.getMessage()
                   for r in caplog.records)


def test_a_busy_prompt_waits_for_the_answer_on_its_way(
        store: redis_server.RedisServer) -> None:
    """Every sample taken, one only pending on a live replica: not exhausted yet (the
    caller waits: Busy); once that answer is given back, the sample is served."""
    records = [chat_record("q", chat_response("1", "2"))]
    with replicas(store.url, records) as (a, b):
        on_its_way = take(a)
        assert ask(b) == "2"
        with pytest.raises(Busy):
            b.take(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": user("q")}))
        a.settle(on_its_way, False)
        assert ask(b) == "1"


def test_a_store_that_lost_the_state_serves_no_sample_again(
        store: redis_server.RedisServer) -> None:
    """A store restarted empty (nothing persisted) has forgotten which samples were
    served: every replica refuses to answer from it, rather than serve them again."""
    with replicas(store.url, REPEATS) as (a, b):
        assert ask(a) == "1"
        store.restart()
        for _ in range(50):
            try:
                got = ask(b)
            except errors.StoreUnavailable as error:
                if "lost" in error.message:
                    break  # (before: the connection that the restart cut)
            else:
                pytest.fail(f"served {got!r} from a store that lost the state")
        else:
            pytest.fail("never said the state was lost")


def test_another_run_under_the_same_prefix_is_refused(
        store: redis_server.RedisServer) -> None:
    with replicas(store.url, REPEATS, n=1) as (a,):
        other = build([chat_record("q", chat_response("1", "2"))])
        with pytest.raises(errors.LoadError, match="holds another run"):
            shared(other, store.url, store.url, f"replay-server:{shape_digest(a.index)}")


@pytest.mark.http
def test_misses_on_one_replica_are_in_another_s_status_and_misses(
        store: redis_server.RedisServer) -> None:
    settings = Settings(state=store.url)
    with replicas(store.url, REPEATS, n=1) as (a,), \
            running(create_app(settings, build(REPEATS))) as url:
        with pytest.raises(errors.NoMatch):
            ask(a, "never saved")
        assert ask(a) == "1"
        base = url.removesuffix("/v1")
        status = httpx.get(f"{base}/replay/status").json()
        assert status["totals"]["replay_no_match"] == 1 and status["totals"]["hits"] == 1
        (miss,) = httpx.get(f"{base}/replay/misses").json()["misses"]
        assert miss["code"] == "replay_no_match"
        assert httpx.post(f"{base}/replay/reset").status_code == 204
        assert ask(a) == "1"  # (the reset on the other replica started a over too)


def test_a_password_in_the_url_is_never_said(store: redis_server.RedisServer) -> None:
    """The store refuses the credentials (it has none): the error names the store by
    its URL without them."""
    url = f"redis://someone:hunter2@127.0.0.1:{store.port}/0"
    with pytest.raises(errors.LoadError) as caught:
        shared(build(REPEATS), url, shown(url))
    assert "hunter2" not in str(caught.value) and f"127.0.0.1:{store.port}" in str(caught.value)
    assert "hunter2" not in repr(Settings(state=url))


def test_without_the_redis_package_the_error_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_state, "redis", None)
    with pytest.raises(errors.LoadError, match=r"pip install 'replay-server\[state\]'"):
        shared(build(REPEATS), "redis://127.0.0.1:9/0", "redis://127.0.0.1:9/0")


def test_two_runs_of_one_shape_never_meet_under_the_default_prefix(
        store: redis_server.RedisServer) -> None:
    """Two rescorings of one model, one benchmark, different generations (two seeds, two
    checkpoints): the same names and counts, so the same shape. Under the default prefix
    they must not share cursors or counts: each serves its own first sample first."""
    first = build([chat_record("q", chat_response("1", "2"))])
    second = build([chat_record("q", chat_response("a", "b"))])
    with ExitStack() as stack:
        found = []
        for index in (first, second):
            state = shared(index, store.url, store.url)
            stack.callback(state.close)
            found.append(Replayer(index, Rules(), state=state))
        a, b = found
        assert ask(a) == "1"
        assert ask(b) == "a"
        assert counted(a).answered == 1


def test_a_replica_serving_with_other_rules_is_refused(
        store: redis_server.RedisServer) -> None:
    """--strict keys its cursors by the sampling parameters too: a replica with it and one
    without would each hand out the same saved samples. The second is refused at start."""
    with replicas(store.url, REPEATS, n=1) as (a,):
        assert ask(a) == "1"
        index = build(REPEATS)
        with pytest.raises(errors.LoadError, match="strict"):
            shared(index, store.url, store.url, rules=Rules(strict=True)).close()


def test_a_run_whose_hold_lapsed_neither_takes_it_back_nor_passes(
        store: redis_server.RedisServer) -> None:
    """`run`'s hold lapsed (it stalled, or lost the store, for longer than LOCK_MS) and
    another `run` took the prefix and reset it: the first one's refresh must not take
    the hold back (two rescorings would share cursors and verdicts), and it cannot vouch
    for its own rescoring any more."""
    with replicas(store.url, REPEATS) as (a, b):
        first, second = a.state, b.state
        assert isinstance(first, RedisState) and isinstance(second, RedisState)
        first.hold()
        with redis.Redis.from_url(store.url) as client:
            client.delete(first.key("run"))  # (what its expiry does)
            second.hold()
            first._beat()
            assert client.get(first.key("run")) == str(second.replica).encode()
        with pytest.raises(errors.StoreUnavailable, match="another `replay-server run`"):
            first.still_held()


@pytest.mark.parametrize("entry", [b"{not json", orjson.dumps({"kind": "new", "replica": 9})])
def test_a_journal_entry_that_cannot_be_counted_fails_the_verdict(
        store: redis_server.RedisServer, entry: bytes,
        caplog: pytest.LogCaptureFixture) -> None:
    """An entry no reader can count (another version's, another tool's, damaged) may be a
    miss: skipped with a log line, `run` would pass without it. It is a failure, said
    once; the entries after it are counted as usual."""
    with replicas(store.url, REPEATS, n=1) as (a,):
        state = a.state
        assert isinstance(state, RedisState)
        with redis.Redis.from_url(store.url) as client:
            client.xadd(state.key("journal"), {"e": entry})
        assert ask(a) == "1"
        stats = counted(a)
        (failure,) = stats.failures.values()
        assert failure.first["code"] == "replay_state_lost"
        assert stats.answered == 1
        assert any(r.levelno == logging.ERROR and "cannot be counted" in r.getMessage()
                   for r in caplog.records)


def test_a_sample_delivered_twice_in_one_pass_fails_the_verdict(
        store: redis_server.RedisServer) -> None:
    """A store that forgets its last writes but not the run (a failover to a replica the
    writes had not reached yet: Redis replicates asynchronously; an append-only file
    synced every second) hands a delivered sample out again. The journal still says who
    had it: the second delivery of a cursor's place in one pass is a failure."""
    with replicas(store.url, REPEATS) as (a, b):
        assert ask(a) == "1"
        a.current()  # (its commit sent)
        state = a.state
        assert isinstance(state, RedisState)
        with redis.Redis.from_url(store.url) as client:
            for key in client.scan_iter(f"{state.key('e0')}:*"):
                client.delete(key)  # (the writes the store lost)
        assert ask(b) == "1"
        stats = counted(a, b)
        (failure,) = stats.failures.values()
        assert failure.first["code"] == "replay_state_lost"
        assert "twice" in failure.first["message"]
