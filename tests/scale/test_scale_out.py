"""Scaling out on one machine, with every real part (issue 33): three `serve --state`
replicas behind Debian's HAProxy (docker/haproxy.cfg, as compose's `scale` profile runs
it), sharing a real redis-server, each serving an index built from a bucket on a local
S3-compatible server (moto's); harnesses rescored through the balancer under `run --state
--server`, whose verdict covers every replica.

- lm-eval's `repeats` (n=1 calls for prompts that saved 3 different samples) scores as the
  original, answer for answer, with one worker per replica and with two;
- olmo-eval's saved samples asked one per call (n=1) come back in saved order, exactly once;
- a miss on any replica, even one the balancer did not send it to, fails `run`;
- a replica killed mid-run loses no sample: the balancer sends its turn to another replica,
  and the shared cursor goes on where it was.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harnesses import lm_eval_runs
from tests.harnesses.commands import REPLAY, ROOT, Ran, offline_env, run
from tests.harnesses.lm_eval_runs import BASE, CASES, under_run
from tests.parts.haproxy import Fleet, replicas
from tests.parts.redis_server import RedisServer
from tests.parts.redis_server import running as redis_running
from tests.parts.s3 import S3, s3_server

pytestmark = [pytest.mark.harness, pytest.mark.slow, pytest.mark.xdist_group("scale")]

LM_EVAL = ROOT / "tests" / "data" / "lm_eval" / "chat_repeats"
OLMO = ROOT / "tests" / "data" / "olmo_eval" / "run_basic"
TASKS = ROOT / "tests" / "data" / "gen" / "tasks"
CASE = CASES["chat_repeats"]
RUN_PRINTED = r"^\||^replay-server run:|^  (model|skipped|rejected|miss) "


@dataclass
class Parts:
    tmp: Path
    s3: S3
    redis: RedisServer
    env: dict[str, str]
    lm_eval: Path  # the index of lm-eval's run, built from the bucket
    olmo: Path  # olmo-eval's

    def run(self, title: str, index: Path, fleet: Fleet, *command: str,
            cwd: Path = ROOT) -> Ran:
        """`replay-server run INDEX --state --server BALANCER -- COMMAND`."""
        return run(title, [*REPLAY, "run", str(index), "--state", self.redis.url,
                           "--server", fleet.url, "--", *command], self.env, cwd,
                   RUN_PRINTED)

    def fleet(self, index: Path, *options: str) -> AbstractContextManager[Fleet]:
        return replicas(["serve", str(index), "--state", self.redis.url, *options], 3,
                        self.tmp, env=self.env)


def upload(s3: S3, bucket: str, prefix: str, folder: Path) -> None:
    s3.bucket(bucket, {f"{prefix}/{p.relative_to(folder)}": p.read_bytes()
                       for p in sorted(folder.rglob("*")) if p.is_file()})


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parts]:
    tmp = tmp_path_factory.mktemp("scale")
    (tmp / "redis").mkdir()
    shutil.copytree(TASKS, tmp / "tasks")
    with s3_server(tmp) as s3, redis_running(tmp / "redis") as redis:
        upload(s3, "runs", "lm_eval", LM_EVAL / "tiny-model")
        upload(s3, "runs", "olmo", OLMO)
        env = {**offline_env(tmp), **s3.env, "REPLAY_SERVER_CACHE": str(tmp / "cache")}
        indexes = {}
        for name in ("lm_eval", "olmo"):
            indexes[name] = tmp / f"{name}.idx"
            built = subprocess.run([*REPLAY, "index", f"s3://runs/{name}/", "-o",
                                    str(indexes[name])], env=env, cwd=tmp, text=True,
                                   capture_output=True, timeout=300)
            assert built.returncode == 0, built.stderr
        yield Parts(tmp, s3, redis, env, indexes["lm_eval"], indexes["olmo"])


def original_lm_eval() -> lm_eval_runs.Scores:
    printed = (LM_EVAL / "printed_scores.txt").read_text()
    return lm_eval_runs.read_scores(LM_EVAL, CASE.task, printed)


def answered_by(fleet: Fleet) -> set[str]:
    """The replicas the balancer sent generation requests to (its log: one line a
    request; `run`'s status probes are GETs)."""
    return {word.split("/")[1] for line in fleet.balancer.lines() if '"POST ' in line
            for word in line.split() if word.startswith("replicas/")}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_lm_eval_repeats_through_the_balancer_score_as_the_original(
        parts: Parts, workers: str) -> None:
    out = parts.tmp / f"lm_eval-workers{workers}"
    with parts.fleet(parts.lm_eval, "--workers", workers) as fleet:
        ran = parts.run(f"lm-eval repeats, 3 replicas x {workers} worker(s)", parts.lm_eval,
                        fleet, *under_run(CASE.command(BASE, out)), cwd=parts.tmp / "tasks")
        spread = answered_by(fleet)
    assert ran.code == 0, ran.output[-3000:]
    assert "every request was answered from the saved run" in ran.output
    assert spread == {"replica1", "replica2", "replica3"}, spread
    rescored, original = lm_eval_runs.read_scores(out, CASE.task, ran.output), original_lm_eval()
    assert rescored.printed == original.printed
    assert rescored.per_doc() == original.per_doc()  # every repeat, in saved order


def one_sample_calls(parts: Parts, fleet: Fleet, out: Path, *extra: str) -> Ran:
    return parts.run("olmo-eval samples one per call, 3 replicas", parts.olmo, fleet,
                     sys.executable, "-m", "tests.scale.one_sample_calls",
                     str(OLMO / "expected_requests.jsonl"), str(out), *extra)


def assert_saved_order(out: Path) -> None:
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert any(len(row["texts"]) == 3 for row in rows)  # (aime: 3 samples, 3 calls)
    for row in rows:
        assert row["texts"] == row["expected"], row["source"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_olmo_eval_samples_asked_one_per_call_come_back_in_saved_order(
        parts: Parts, workers: str) -> None:
    out = parts.tmp / f"olmo-workers{workers}.jsonl"
    with parts.fleet(parts.olmo, "--workers", workers) as fleet:
        ran = one_sample_calls(parts, fleet, out)
        spread = answered_by(fleet)
    assert ran.code == 0, ran.output[-3000:]
    assert spread == {"replica1", "replica2", "replica3"}, spread
    assert_saved_order(out)


def test_a_miss_on_any_replica_fails_run(parts: Parts) -> None:
    """The balancer's requests all replay; one changed prompt sent straight to the third
    replica, behind the balancer's back, still fails `run`."""
    with parts.fleet(parts.olmo) as fleet:
        third = fleet.replicas[2].url
        script = ("import os, httpx\n"
                  f"r = httpx.post({third!r} + '/completions', json={{'model': "
                  "'allenai/Olmo-3-7B-Think', 'prompt': 'a prompt nobody saved'}, "
                  "headers={'authorization': 'Bearer k'})\n"
                  "assert r.status_code == 404, r.text\n")
        ran = parts.run("olmo-eval with one miss on a replica", parts.olmo, fleet,
                        "sh", "-c", f"{sys.executable} -m tests.scale.one_sample_calls "
                        f"{OLMO / 'expected_requests.jsonl'} {parts.tmp / 'miss.jsonl'} && "
                        f"{sys.executable} -c \"$0\"", script)
    assert ran.code == 3, ran.output[-3000:]
    assert "1 distinct request(s) got no saved generation" in ran.output


def test_a_replica_killed_mid_run_loses_no_sample(parts: Parts) -> None:
    """Replica 2 is killed (SIGKILL) between two calls for one prompt's samples: the
    balancer sends its turns to the others (retry-on conn-failure, redispatch), and the
    shared cursor hands out the samples that remain, in saved order, exactly once."""
    out, pause = parts.tmp / "killed.jsonl", parts.tmp / "pause"
    pause.mkdir()
    with parts.fleet(parts.olmo) as fleet:
        def kill_when_paused() -> None:
            deadline = time.monotonic() + 120
            while not (pause / "paused").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            fleet.kill(1)
            (pause / "go").touch()

        killer = threading.Thread(target=kill_when_paused, daemon=True)
        killer.start()
        # (after the 9th call: the first aime prompt's first sample is served, two remain)
        ran = one_sample_calls(parts, fleet, out, "--pause-after", "9", str(pause))
        killer.join(5)
    assert ran.code == 0, ran.output[-3000:]
    assert_saved_order(out)
