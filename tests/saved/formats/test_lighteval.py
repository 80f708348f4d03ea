"""lighteval details (tests/data/lighteval, written by lighteval 0.13 against the fake model)."""

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
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay_server.errors import LoadError
from replay_server.index.loading import load
from replay_server.saved.formats import LoadContext
from replay_server.saved.formats.lighteval import DUPLICATE, NO_PYARROW
from replay_server.saved.loader import plan, read
from replay_server.saved.record import Record, strip_transport
from replay_server.settings import Settings
from tests.support import assert_error, serving

DATA = Path(__file__).parents[2] / "data" / "lighteval"
ROOT = Path(__file__).parents[3]
CASES = ["greedy", "sampled"]
Rows = list[dict[str, Any]]


def wire(case: str | Path) -> list[dict[str, Any]]:
    folder = case if isinstance(case, Path) else DATA / case
    return [json.loads(line) for line in (folder / "wire.jsonl").read_text().splitlines()]


def records(path: Path) -> list[Record]:
    return list(read(plan([path]), LoadContext()))


def details(run: Path) -> Path:
    return next(run.glob("details/**/*.parquet"))


def edited(tmp_path: Path, case: str, change: Callable[[Rows], Rows | None]) -> Path:
    """A copy of a saved run whose details rows went through `change`."""
    run = Path(shutil.copytree(DATA / case, tmp_path / case))
    path = details(run)
    rows = pq.read_table(path).to_pylist()
    rows = change(rows) or rows
    pq.write_table(pa.Table.from_pylist(rows), path)
    return run


def answer(response: dict[str, Any]) -> list[tuple[Any, Any]]:
    """What a client takes from a chat response: each choice's content and reasoning."""
    return [(c["message"]["content"], c["message"].get("reasoning"))
            for c in response["choices"]]


def test_load_counts() -> None:
    for case, samples in (("greedy", 6), ("sampled", 18)):
        loaded = load([DATA / case], progress=False)
        run = loaded.index.models["tiny-model"]
        assert (run.records, len(run.entries), run.samples, run.unusable_records) == \
            (6, 6, samples, 0)
        assert not loaded.ctx.skipped and not loaded.ctx.bad_lines
        assert {p.name for p in loaded.plan.ignored} == {"wire.jsonl", "printed_scores.txt"}


@pytest.mark.parametrize("case", CASES)
def test_each_record_holds_the_exact_body_lighteval_sent(case: str) -> None:
    saved = {orjson.dumps(r.request, option=orjson.OPT_SORT_KEYS): r
             for r in records(DATA / case)}
    for call in wire(case):
        record = saved.pop(orjson.dumps(strip_transport(call["request"]),
                                        option=orjson.OPT_SORT_KEYS))
        assert record.response is not None
        assert answer(record.response) == answer(call["response"])
        assert record.response["usage"] is None
        assert {c["finish_reason"] for c in record.response["choices"]} == {None}
        assert record.source["harness"] == "lighteval"
    assert not saved


@pytest.mark.http
@pytest.mark.parametrize("case", CASES)
def test_every_request_lighteval_sent_gets_its_saved_generation_strictly(case: str) -> None:
    with serving([DATA / case], Settings(strict=True)) as url, \
            httpx.Client(base_url=url.removesuffix("/v1")) as http:
        for call in wire(case) * 2:  # stateless: a second pass gets the same
            got = http.post(call["path"], json=call["request"])
            assert got.status_code == 200, got.text
            assert answer(got.json()) == answer(call["response"])
            assert got.json()["usage"] is None
        request = wire(case)[0]["request"]
        assert_error(http.post("/v1/chat/completions", json={**request, "seed": 99}), 400,
                     "replay_params_mismatch")


@pytest.mark.http
def test_an_empty_answer_that_may_be_a_failed_call_is_unusable(tmp_path: Path) -> None:
    def change(rows: Rows) -> None:
        rows[0]["model_response"]["text"] = [""]           # no reasoning saved: unknowable
        rows[1]["model_response"]["text"] = [""]           # with reasoning: a real answer
        rows[2]["model_response"]["text"] = [None]

    run = edited(tmp_path, "greedy", change)
    calls = {json.dumps(c["request"]["messages"]): c for c in wire("greedy")}
    rows = pq.read_table(details(run)).to_pylist()
    requests = [calls[json.dumps(r["model_response"]["input"])]["request"] for r in rows[:3]]
    assert rows[1]["model_response"]["reasonings"] == ["23 plus 19 is 42."]
    with serving([run]) as url, httpx.Client(base_url=url) as http:
        error = assert_error(http.post("/chat/completions", json=requests[0]), 400,
                             "replay_unusable")
        assert "also what it saves for a call that failed" in error["message"]
        got = http.post("/chat/completions", json=requests[1]).json()
        assert answer(got) == [("", "23 plus 19 is 42.")]
        assert_error(http.post("/chat/completions", json=requests[2]), 400, "replay_unusable")


@pytest.mark.http
def test_samples_that_lighteval_dropped_are_not_served(tmp_path: Path) -> None:
    def change(rows: Rows) -> None:
        rows[0]["model_response"]["text"] = [""]  # first sample empty: the others dropped
        rows[1]["model_response"]["text"] = rows[1]["model_response"]["text"][:2]

    run = edited(tmp_path, "sampled", change)
    loaded = load([run], progress=False)
    assert loaded.index.models["tiny-model"].unusable_records == 2
    calls = {json.dumps(c["request"]["messages"]): c for c in wire("sampled")}
    rows = pq.read_table(details(run)).to_pylist()
    with serving([run]) as url, httpx.Client(base_url=url) as http:
        for row, why in ((rows[0], "one empty text for num_samples 3"),
                         (rows[1], "2 texts for num_samples 3")):
            request = calls[json.dumps(row["model_response"]["input"])]["request"]
            for n in (3, 2, 1):
                error = assert_error(http.post("/chat/completions", json={**request, "n": n}),
                                     400, "replay_unusable")
                assert why in error["message"]


@pytest.mark.parametrize("form", [repr, json.dumps])
def test_messages_saved_as_a_repr_or_json_string_are_parsed_not_evaluated(
        tmp_path: Path, form: Callable[[Any], str]) -> None:
    def change(rows: Rows) -> None:
        for row in rows:
            row["model_response"]["input"] = form(row["model_response"]["input"])

    run = edited(tmp_path, "greedy", change)
    assert [r.request for r in records(run)] == [r.request for r in records(DATA / "greedy")]
    assert isinstance(pq.read_table(details(run)).to_pylist()[0]["model_response"]["input"],
                      str)


def test_input_that_is_code_not_a_literal_is_a_bad_row(tmp_path: Path) -> None:
    def change(rows: Rows) -> None:
        for row in rows:
            row["model_response"]["input"] = "__import__('os').system('false')"

    run = edited(tmp_path, "greedy", change)
    with pytest.raises(LoadError) as error:
        load([run], progress=False)
    assert (error.value.file, error.value.line, error.value.field) == \
        (str(details(run)), 1, "model_response.input")


def test_duplicate_rows_are_read_once_and_conflicting_ones_refused(tmp_path: Path) -> None:
    run = edited(tmp_path, "greedy", lambda rows: rows + rows[:1])
    loaded = load([run], progress=False)
    assert loaded.ctx.skipped == {DUPLICATE: 1}
    assert loaded.ctx.skipped_examples[DUPLICATE] == [f"{details(run)}:7"]
    assert loaded.index.models["tiny-model"].records == 6

    def conflict(rows: Rows) -> Rows:
        copy = json.loads(json.dumps(rows[0]))
        copy["model_response"]["text"] = ["The answer is 1."]
        return [*rows, copy]

    run = edited(tmp_path / "conflict", "greedy", conflict)
    with pytest.raises(LoadError) as error:
        load([run], progress=False)
    assert (error.value.line, error.value.field) == (7, "doc.id")
    assert "already at row 1 with another prompt or answer" in error.value.reason


@pytest.mark.http
def test_two_tasks_of_one_run_sharing_a_prompt_with_different_answers_are_ambiguous(
        tmp_path: Path) -> None:
    run = Path(shutil.copytree(DATA / "greedy", tmp_path / "greedy"))
    first = details(run)
    other = first.with_name(first.name.replace("arith_lighteval|1", "arith_copy|1"))
    rows = pq.read_table(first).to_pylist()
    for row in rows:
        row["doc"]["task_name"] = "arith_copy|1"
        row["model_response"]["text"] = ["The answer is 0."]
    pq.write_table(pa.Table.from_pylist(rows), other)
    with serving([run]) as url, httpx.Client(base_url=url) as http:
        assert_error(http.post("/chat/completions", json=wire("greedy")[0]["request"]), 400,
                     "replay_ambiguous")


def test_a_damaged_details_file_is_named(tmp_path: Path) -> None:
    run = Path(shutil.copytree(DATA / "greedy", tmp_path / "greedy"))
    path = details(run)
    path.write_bytes(path.read_bytes()[:3000])
    with pytest.raises(LoadError, match="not a readable parquet file") as error:
        load([run], progress=False)
    assert error.value.file == str(path)
    loaded = load([run], progress=False, skip_bad_lines=True)
    assert not loaded.index.models and len(loaded.ctx.bad_lines) == 1


def test_a_details_file_without_its_results_file_is_named(tmp_path: Path) -> None:
    run = Path(shutil.copytree(DATA / "greedy", tmp_path / "greedy"))
    shutil.rmtree(run / "results")
    with pytest.raises(LoadError) as error:
        load([run], progress=False)
    assert error.value.file == str(details(run))
    assert "no results_2026-12-01T04-32-27.568304.json" in error.value.reason


def test_without_pyarrow_the_message_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(LoadError, match=r"pip install 'replay-server\[parquet\]'") as error:
        load([DATA / "greedy"], progress=False)
    assert error.value.reason == NO_PYARROW


def test_inspect_and_convert_and_the_api_key_is_never_copied(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "replay_server"]
    results = next(DATA.glob("*/results/**/*.json")).read_text()
    assert '"api_key": "test-key"' in results  # lighteval writes it in clear
    report = subprocess.run([*cli, "inspect", str(DATA), "--json"], capture_output=True,
                            text=True, cwd=ROOT, check=True).stdout
    out = tmp_path / "lighteval.jsonl"
    subprocess.run([*cli, "convert", str(DATA), "-o", str(out)], cwd=ROOT, check=True,
                   capture_output=True)
    assert load([out], progress=False).index.models == load([DATA], progress=False).index.models
    assert "test-key" not in report and "test-key" not in out.read_text()
    assert json.loads(report)["models"]["tiny-model"]["records"] == 12
