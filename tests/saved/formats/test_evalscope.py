"""evalscope work directories (tests/data/evalscope, written by evalscope 1.14 against the
fake model)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from replay_server.errors import LoadError
from replay_server.index.index import Entry
from replay_server.index.loading import load
from replay_server.saved.formats import LoadContext
from replay_server.saved.formats.evalscope import AGENT, DUPLICATE, TOOL_CALLS
from replay_server.saved.loader import plan, read
from replay_server.saved.record import Record, strip_transport
from replay_server.settings import Settings
from tests.support import assert_error, serving

DATA = Path(__file__).parents[2] / "data" / "evalscope"
ROOT = Path(__file__).parents[3]
CASES = ["plain", "repeats"]
Lines = list[dict[str, Any]]


def wire(case: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / case / "wire.jsonl").read_text().splitlines()]


def records(path: Path) -> list[Record]:
    return list(read(plan([path]), LoadContext()))


def predictions(run: Path) -> Path:
    return next(run.glob("predictions/*/*.jsonl"))


def lines(run: Path) -> Lines:
    return [json.loads(line) for line in predictions(run).read_text().splitlines()]


def edited(tmp_path: Path, case: str, change: Callable[[Lines], Lines | None]) -> Path:
    """A copy of a saved run whose prediction lines went through `change`."""
    run = Path(shutil.copytree(DATA / case, tmp_path / case))
    saved = lines(run)
    saved = change(saved) or saved
    predictions(run).write_text("".join(json.dumps(line) + "\n" for line in saved))
    return run


def answer(response: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a client takes from a chat response."""
    return [(c["message"]["content"], c["message"].get("reasoning"), c["finish_reason"])
            for c in response["choices"]]


def counts(usage: dict[str, Any]) -> tuple[Any, ...]:
    return (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"],
            usage["completion_tokens_details"])


def key(request: dict[str, Any]) -> bytes:
    return orjson.dumps(strip_transport(request), option=orjson.OPT_SORT_KEYS)


def test_load_counts() -> None:
    for case, records_, instances in (("plain", 6, {1: 6}), ("repeats", 18, {3: 6})):
        loaded = load([DATA / case], progress=False)
        run = loaded.index.models["tiny-model"]
        assert (run.records, len(run.entries), run.samples, run.unusable_records) == \
            (records_, 6, records_, 0)
        assert not loaded.ctx.skipped and not loaded.ctx.bad_lines
        sizes = [len(e.instances[0].exchanges) if isinstance(e, Entry) else 1
                 for e in run.entries.values()]
        assert {k: sizes.count(k) for k in set(sizes)} == instances


@pytest.mark.parametrize("case", CASES)
def test_each_record_holds_the_exact_body_evalscope_sent_and_its_answer(case: str) -> None:
    saved = {r.response["id"]: r for r in records(DATA / case) if r.response}
    for call in wire(case):
        record = saved.pop(call["response"]["id"])  # evalscope keeps the response id
        assert record.request == strip_transport(call["request"])
        assert record.response is not None
        assert answer(record.response) == answer(call["response"])
        assert counts(record.response["usage"]) == counts(call["response"]["usage"])
        assert record.response["model"] == call["response"]["model"]
    assert not saved


@pytest.mark.http
def test_every_request_evalscope_sent_gets_its_saved_generation_strictly() -> None:
    with serving([DATA / "plain"], Settings(strict=True)) as url, \
            httpx.Client(base_url=url.removesuffix("/v1")) as http:
        for call in wire("plain") * 2:
            got = http.post(call["path"], json=call["request"]).json()
            assert answer(got) == answer(call["response"])
            assert got["id"] == call["response"]["id"]
            assert counts(got["usage"]) == counts(call["response"]["usage"])


@pytest.mark.http
def test_repeats_are_served_in_generation_order_then_exhausted() -> None:
    calls = wire("repeats")
    by_id = {c["response"]["id"]: c for c in calls}
    saved = sorted(lines(DATA / "repeats"), key=lambda line: line["index"])
    with serving([DATA / "repeats"], Settings(strict=True)) as url, \
            httpx.Client(base_url=url) as http:
        for group in range(6):
            request = by_id[saved[3 * group]["model_output"]["id"]]["request"]
            for repeat in range(3):  # the k identical requests evalscope sends
                got = http.post("/chat/completions", json=request).json()
                assert got["id"] == saved[3 * group + repeat]["model_output"]["id"]
                assert answer(got) == answer(by_id[got["id"]]["response"])
            assert_error(http.post("/chat/completions", json=request), 400, "replay_exhausted")
    # in any arrival order, the k answers of a doc are the k it saved
    assert sorted(key(c["request"]) for c in calls) == sorted(
        key(by_id[line["model_output"]["id"]]["request"]) for line in saved)


@pytest.mark.http
def test_an_answer_evalscope_made_from_an_error_is_not_served(tmp_path: Path) -> None:
    def change(saved: Lines) -> None:
        # what evalscope saves when a 400 says "context window": the message as an answer
        output = saved[0]["model_output"]
        output.update(id=None, usage=None)
        output["choices"][0].update(stop_reason="model_length")
        output["choices"][0]["message"]["content"] = "prompt does not fit the context window"
        saved[0]["messages"][-1] = output["choices"][0]["message"]
        saved[1]["model_output"]["error"] = "the server went away"

    run = edited(tmp_path, "plain", change)
    saved = lines(run)
    by_id = {c["response"]["id"]: c["request"] for c in wire("plain")}
    first = next(c["request"] for c in wire("plain")
                 if c["request"]["messages"] == [{"role": m["role"], "content": m["content"]}
                                                 for m in saved[0]["messages"][:-1]])
    with serving([run]) as url, httpx.Client(base_url=url) as http:
        error = assert_error(http.post("/chat/completions", json=first), 400, "replay_unusable")
        assert "evalscope made this answer itself" in error["message"]
        error = assert_error(http.post("/chat/completions",
                                       json=by_id[saved[1]["model_output"]["id"]]),
                             400, "replay_unusable")
        assert "the server went away" in error["message"]


@pytest.mark.http
def test_refusals_unknown_finish_reasons_and_empty_answers_are_served_as_saved(
        tmp_path: Path) -> None:
    def change(saved: Lines) -> None:
        refusal = saved[0]["model_output"]["choices"][0]
        refusal["message"]["content"] = [{"type": "text", "text": "I can't.", "refusal": True}]
        saved[0]["messages"][-1] = refusal["message"]
        odd = saved[1]["model_output"]
        odd["choices"][0]["stop_reason"] = "unknown"
        odd["metadata"] = {"finish_reasons": {"0": "abort"}}
        empty = saved[2]["model_output"]["choices"][0]
        empty["message"]["content"] = ""
        saved[2]["messages"][-1] = empty["message"]

    run = edited(tmp_path, "plain", change)
    saved = lines(run)
    by_id = {c["response"]["id"]: c["request"] for c in wire("plain")}
    with serving([run]) as url, httpx.Client(base_url=url) as http:
        def ask(i: int) -> dict[str, Any]:
            got = http.post("/chat/completions", json=by_id[saved[i]["model_output"]["id"]])
            return dict(got.json()["choices"][0])
        refused = ask(0)
        assert (refused["message"]["content"], refused["message"]["refusal"]) == \
            (None, "I can't.")
        assert ask(1)["finish_reason"] == "abort"
        assert ask(2)["message"]["content"] == ""


def test_duplicate_indexes_are_read_once_and_conflicting_ones_refused(tmp_path: Path) -> None:
    run = edited(tmp_path, "plain", lambda saved: saved + saved[:2])
    loaded = load([run], progress=False)
    assert loaded.ctx.skipped == {DUPLICATE: 2}
    assert loaded.index.models["tiny-model"].records == 6

    def rerun(saved: Lines) -> Lines:  # what evalscope appends when rerun into one folder
        again = json.loads(json.dumps(saved[0]))
        again["model_output"]["id"] = "chatcmpl-rerun"
        for message in again["messages"][:-1]:
            message["id"] = "another-random-id"
        return [*saved, again]

    run = edited(tmp_path / "rerun", "plain", rerun)
    assert load([run], progress=False).ctx.skipped == {DUPLICATE: 1}

    def rerun_with_another_answer(saved: Lines) -> Lines:
        again = rerun(saved)
        again[-1]["model_output"]["choices"][0]["message"]["content"] = "Something else."
        again[-1]["messages"][-1]["content"] = "Something else."
        return again

    run = edited(tmp_path / "other", "plain", rerun_with_another_answer)
    with pytest.raises(LoadError, match="another prompt or answer") as error:
        load([run], progress=False)
    assert (error.value.file, error.value.line, error.value.field) == \
        (str(predictions(run)), 7, "index")


def test_repeats_of_one_doc_must_share_their_prompt(tmp_path: Path) -> None:
    def change(saved: Lines) -> None:
        one = next(line for line in saved if line["index"] == 1)
        one["messages"][0]["content"] = "What is 1 + 1?"

    run = edited(tmp_path, "repeats", change)
    with pytest.raises(LoadError, match="of doc 0 .* has another prompt") as error:
        load([run], progress=False)
    assert error.value.field == "messages"


def test_a_last_message_that_is_not_the_answer_is_a_bad_line(tmp_path: Path) -> None:
    def change(saved: Lines) -> None:
        saved[3]["messages"][-1] = {**saved[3]["messages"][-1], "content": "something else"}

    run = edited(tmp_path, "plain", change)
    with pytest.raises(LoadError) as error:
        load([run], progress=False)
    assert (error.value.line, error.value.field) == (4, "messages")
    assert "not model_output's answer" in error.value.reason


def test_agent_runs_tool_calls_and_prompt_parts_are_skipped_with_reasons(
        tmp_path: Path) -> None:
    def change(saved: Lines) -> None:
        saved[0]["agent_trace"] = {"steps": []}
        call = {"id": "c1", "function": {"name": "calc", "arguments": {}}, "type": "function"}
        saved[1]["model_output"]["choices"][0]["message"]["tool_calls"] = [call]
        saved[2]["messages"][0]["content"] = [{"type": "image", "image": "x.png"}]

    run = edited(tmp_path, "plain", change)
    loaded = load([run], progress=False)
    reasons = dict(loaded.ctx.skipped)
    assert reasons.pop(AGENT) == 1 and reasons.pop(TOOL_CALLS) == 1
    assert [(k.split(" (")[0], v) for k, v in reasons.items()] == [
        ("prompt with a message evalscope sends in a form not rebuilt here", 1)]
    assert loaded.index.models["tiny-model"].records == 3


def test_the_config_decides_what_can_be_rebuilt(tmp_path: Path) -> None:
    run = Path(shutil.copytree(DATA / "plain", tmp_path / "plain"))
    config = run / "configs" / "task_config.yaml"
    text = config.read_text()
    config.write_text(text.replace("eval_type: openai_api", "eval_type: llm_ckpt"))
    loaded = load([run], progress=False)
    assert not loaded.index.models
    assert list(loaded.ctx.skipped.values()) == [6]
    assert "eval_type 'llm_ckpt'" in next(iter(loaded.ctx.skipped))
    config.unlink()
    with pytest.raises(LoadError) as error:
        load([run], progress=False)
    assert error.value.file == str(predictions(run))
    assert "task_config.yaml beside predictions/" in error.value.reason


def test_sampling_settings_come_from_generation_config() -> None:
    record = records(DATA / "repeats")[0]
    assert {k: v for k, v in record.request.items() if k not in ("messages", "model")} == \
        {"max_tokens": 64, "seed": 1234, "temperature": 0.7, "top_p": 0.95}


def test_inspect_and_convert(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "replay_server"]
    runs = [str(DATA / case) for case in CASES]
    report = subprocess.run([*cli, "inspect", *runs, "--json"], capture_output=True,
                            text=True, cwd=ROOT, check=True).stdout
    assert json.loads(report)["models"]["tiny-model"]["records"] == 24
    out = tmp_path / "evalscope.jsonl"
    subprocess.run([*cli, "convert", *runs, "-o", str(out)], cwd=ROOT, check=True,
                   capture_output=True)
    assert load([out], progress=False).index.models == load(runs, progress=False).index.models
