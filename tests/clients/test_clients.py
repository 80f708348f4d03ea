"""Client libraries record and replay identically: each session (tests/clients/) runs once
through the recorder in front of the fake model and once against `serve` of what was
recorded, and gets the same answers, ids, tool calls, and the same streamed deltas or
partials, one by one (a replay that sent a field in one piece would give fewer)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from replay_server.saved.writer import RecordWriter
from replay_server.web.recorder import Recorder, create_record_app
from tests.fakemodel.server import create_app as fake_model
from tests.harnesses.commands import offline_env
from tests.support import running, serving, venv_python

pytestmark = [pytest.mark.harness, pytest.mark.http]
CLIENTS = Path(__file__).parent
MODEL = "tiny-model"
INSTRUCTOR = "instructor==1.17.0"


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running(fake_model([MODEL])) as url:
        yield url


def session(script: str, url: str, env: dict[str, str], python: str = sys.executable
            ) -> dict[str, Any]:
    p = subprocess.run([python, str(CLIENTS / script), url], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    result: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def record_and_replay(script: str, upstream: str, tmp_path: Path, python: str = sys.executable
                      ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(recorded session, replayed session, the replay's /replay/status)."""
    env = offline_env(tmp_path)
    out = tmp_path / "run.jsonl"
    rec = Recorder(upstream, RecordWriter(out))
    with running(create_record_app(rec)) as url:
        recorded = session(script, url, env, python)
    rec.writer.close()
    assert rec.counts["recorded"] > 0 and rec.counts["aborted"] == 0
    with serving([out]) as url:
        replayed = session(script, url, env, python)
        status = httpx.get(url.removesuffix("/v1") + "/replay/status").json()
    return recorded, replayed, status


def replays_exactly(status: dict[str, Any]) -> None:
    totals = status["totals"]
    assert totals["hits"] > 0 and totals["unused_samples"] == 0, totals
    assert not any(v for k, v in totals.items() if k.startswith("replay_")), totals
    assert not status["rejected"], status["rejected"]


def test_openai_agents_default_model(upstream: str, tmp_path: Path) -> None:
    recorded, replayed, status = record_and_replay("openai_agents_session.py", upstream,
                                                   tmp_path)
    assert replayed == recorded
    replays_exactly(status)
    assert "gpt-" in next(iter(status["models"]))  # the SDK's own default model name
    assert recorded["tool_items"].count("ToolCallItem") == 1
    assert len(recorded["stream_deltas"]) > 3
    assert recorded["chain"][2]


def test_pydantic_ai_responses_model(upstream: str, tmp_path: Path) -> None:
    recorded, replayed, status = record_and_replay("pydantic_ai_session.py", upstream,
                                                   tmp_path)
    assert replayed == recorded
    replays_exactly(status)
    assert "ToolCallPart" in recorded["tool_parts"] and len(recorded["stream_deltas"]) > 3


def test_langchain_use_responses_api(upstream: str, tmp_path: Path) -> None:
    recorded, replayed, status = record_and_replay("langchain_openai_session.py", upstream,
                                                   tmp_path)
    assert replayed == recorded
    replays_exactly(status)
    assert recorded["tool_calls"] == [["calculator", {"expression": "6 * 7"}]]
    assert len(recorded["stream_chunks"]) > 3


def test_dspy_streamify_gets_as_many_chunks(upstream: str, tmp_path: Path) -> None:
    recorded, replayed, status = record_and_replay("dspy_session.py", upstream, tmp_path)
    assert replayed == recorded
    replays_exactly(status)
    for api in ("chat", "responses"):
        assert len(recorded[api]["stream_chunks"]) > 2, recorded[api]
        assert "".join(recorded[api]["stream_chunks"]).strip() == recorded[api]["stream_final"]


def instructor_python() -> str:
    """instructor holds openai and jiter back below what the project's other clients need:
    a venv of its own."""
    return venv_python("instructor-venv", INSTRUCTOR)


def test_instructor_create_partial_gets_as_many_partials(upstream: str, tmp_path: Path
                                                          ) -> None:
    recorded, replayed, status = record_and_replay("instructor_session.py", upstream,
                                                   tmp_path, instructor_python())
    assert replayed == recorded
    replays_exactly(status)
    for mode in ("responses_tools", "tool_call"):
        partials = recorded[mode]["partials"]
        assert len(partials) > 3 and partials[-1] == recorded[mode]["create"] == "6 * 7"
