"""inspect_ai logs of the `openai/` provider over the Responses API (tests/data/inspect_ai/
responses*, written by the real harness), read as /v1/responses records; and inspect_ai
rescored against them, and against a recording of the same run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from replay_server.index.loading import load
from replay_server.paths import RESPONSES_PATH
from replay_server.saved.formats import LoadContext
from replay_server.saved.loader import plan, read
from replay_server.saved.record import Record, strip_transport
from replay_server.saved.writer import RecordWriter
from replay_server.settings import Settings
from replay_server.web.recorder import Recorder, create_record_app
from replay_server.wire.responses.request import output_items
from replay_server.wire.responses.stream_in import aggregate
from tests.fakemodel.server import create_app as fake_model
from tests.harnesses.commands import offline_env
from tests.support import running, serving

DATA = Path(__file__).parents[2] / "data" / "inspect_ai"
TASKS = Path(__file__).parents[2] / "data" / "gen" / "tasks"
CASES = ["responses", "responses_stream"]
# inspect's openai provider asks once, before the samples, whether reasoning summaries work
# (`reasoning: {effort: low, summary: auto}`, "Please say 'hello, world'"); that call is in
# no sample, so it is not in the log.
PROBE = "Please say 'hello, world'"


def wire(case: str) -> list[dict[str, Any]]:
    lines = (DATA / case / "wire.jsonl").read_text().splitlines()
    return [w for w in map(json.loads, lines) if w["request"]["input"] != PROBE]


def log(case: str) -> Path:
    return next((DATA / case).glob("*.eval"))


def records(path: Path) -> list[Record]:
    return list(read(plan([path]), LoadContext()))


@pytest.mark.parametrize("case", CASES)
def test_responses_calls_are_read_as_responses_records(case: str) -> None:
    loaded = load([DATA / case], progress=False)
    run = loaded.index.models["tiny-model"]
    assert (run.records, len(run.entries), run.unusable_records) == (7, 7, 0)
    assert not loaded.ctx.skipped
    assert {r.endpoint for r in records(log(case))} == {RESPONSES_PATH}


@pytest.mark.parametrize("case", CASES)
def test_each_record_is_keyed_on_the_exact_body_that_was_sent(case: str) -> None:
    saved = {orjson.dumps(r.request, option=orjson.OPT_SORT_KEYS): r for r in records(log(case))}
    for call in wire(case):
        record = saved.pop(orjson.dumps(strip_transport(call["request"]),
                                        option=orjson.OPT_SORT_KEYS))
        assert record.response is not None
        sent = call["response"]
        assert record.response["id"] == sent["id"]
        assert record.response["created_at"] == sent["created_at"]
        assert output_items(record.response) == output_items(sent)
        assert [o["id"] for o in record.response["output"]] == [o["id"] for o in sent["output"]]
        for count in ("input_tokens", "output_tokens", "total_tokens"):
            assert record.response["usage"][count] == sent["usage"][count]
    assert not saved


@pytest.mark.http
@pytest.mark.parametrize("case", CASES)
def test_the_requests_inspect_sends_get_their_answers(case: str) -> None:
    with serving([DATA / case], Settings(strict=True)) as url, \
            httpx.Client(base_url=url) as http:
        for call in wire(case):
            got = http.post("/responses", json=call["request"])
            assert got.status_code == 200, got.text
            body = got.json() if not call["request"].get("stream") else \
                aggregate(got.content).response
            assert (body["id"], output_items(body)) == (call["response"]["id"],
                                                        output_items(call["response"]))


# --------------------------------------------------------------------------- inspect itself


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running(fake_model(["tiny-model"])) as url:
        yield url


def inspect_eval(url: str, logs: Path, *extra: str) -> tuple[str, dict[str, float]]:
    """`inspect eval` of the arithmetic task with `openai/tiny-model` over the Responses
    API against `url`: (its output, the scores in its log)."""
    from inspect_ai.log import read_eval_log

    env = {**offline_env(logs.parent), "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "x"}
    p = subprocess.run([sys.executable, "-m", "inspect_ai", "eval", "inspect_arith.py",
                        "--model", "openai/tiny-model", "-M", "responses_api=true",
                        "--log-dir", str(logs), "--temperature", "0", "--display", "plain",
                        *extra], cwd=TASKS, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    result = read_eval_log(str(next(logs.glob("*.eval"))))
    assert result.status == "success", p.stdout[-3000:]
    scores = {f"{s.name}/{k}": m.value for s in (result.results.scores if result.results
                                                   else []) for k, m in s.metrics.items()}
    return p.stdout, scores


def all_answered(url: str) -> None:
    status = httpx.get(url.removesuffix("/v1") + "/replay/status").json()
    assert status["totals"]["hits"] > 0 and status["totals"]["unused_samples"] == 0, status
    assert not any(v for k, v in status["totals"].items() if k.startswith("replay_")), status


@pytest.mark.harness
@pytest.mark.http
def test_inspect_rescored_from_its_responses_log_scores_the_same(tmp_path: Path) -> None:
    """From the log, with `--reasoning-summary auto`: the log holds no answer to inspect's
    start-up probe, and that option (what the probe found out) skips it."""
    original = (DATA / "responses" / "printed_scores.txt").read_text()
    with serving([log("responses")]) as url:
        _, scores = inspect_eval(url, tmp_path / "logs", "--reasoning-summary", "auto")
        all_answered(url)
    assert f"includes/accuracy: {scores['includes/accuracy']}" in original


@pytest.mark.harness
@pytest.mark.http
@pytest.mark.parametrize("streaming", [False, True])
def test_inspect_rescored_from_a_recording_scores_the_same(upstream: str, tmp_path: Path,
                                                           streaming: bool) -> None:
    extra = ["-M", "streaming=true"] if streaming else []
    rec = Recorder(upstream, RecordWriter(tmp_path / "run.jsonl"))
    with running(create_record_app(rec)) as url:
        _, original = inspect_eval(url, tmp_path / "original", *extra)
    rec.writer.close()
    with serving([tmp_path / "run.jsonl"]) as url:
        _, replayed = inspect_eval(url, tmp_path / "replayed", *extra)
        all_answered(url)
    assert replayed == original and 0 < original["includes/accuracy"] < 1
