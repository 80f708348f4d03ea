"""The Anthropic Message Batches reader: request lines and results lines joined on custom_id
(tests/data/anthropic_batch/, made by tests/data/gen/make_anthropic_batch.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anthropic
import pytest

from replay_server.errors import LoadError
from replay_server.index.loading import load
from tests.support import ROOT, serving, write_jsonl

DATA = ROOT / "tests" / "data" / "anthropic_batch"
MODEL = "claude-fake"


def requests_of(name: str) -> dict[str, dict[str, Any]]:
    lines = (DATA / f"{name}_requests.jsonl").read_text().splitlines()
    return {obj["custom_id"]: obj["params"] for obj in map(json.loads, lines)}


def results_of(name: str) -> dict[str, dict[str, Any]]:
    lines = (DATA / f"{name}_results.jsonl").read_text().splitlines()
    return {obj["custom_id"]: obj["result"] for obj in map(json.loads, lines)}


def create(client: anthropic.Anthropic, params: dict[str, Any]) -> Any:
    """`messages.create` with a request line's params as they were sent (anthropic 2.17's
    `create` takes no `temperature`: it goes in `extra_body`)."""
    rest = {k: v for k, v in params.items() if k != "temperature"}
    return client.messages.with_raw_response.create(
        **rest, extra_body={"temperature": params["temperature"]})


def test_the_saved_batches_join_on_custom_id() -> None:
    loaded = load([DATA], progress=False)
    run = loaded.index.models[MODEL]
    assert run.records == 6 and run.samples == 4 and run.unusable_records == 2
    assert loaded.ctx.skipped["errored batch request"] == 1
    assert loaded.ctx.skipped["canceled batch request"] == 1


@pytest.mark.http
def test_each_succeeded_request_replays_its_saved_message() -> None:
    saved = results_of("arith")
    with serving([DATA]) as url, anthropic.Anthropic(base_url=url.removesuffix("/v1"),
                                                    api_key="any-key") as client:
        for custom_id, params in requests_of("arith").items():
            if saved[custom_id]["type"] == "succeeded":
                call = create(client, params)
                assert call.http_response.json() == saved[custom_id]["message"]
        with pytest.raises(anthropic.BadRequestError) as refused:
            create(client, requests_of("canceled")["canceled-0"])
    assert "replay_unusable" in str(refused.value) and "canceled" in str(refused.value)


def group(tmp_path: Path, requests: list[Any], results: list[Any]) -> Path:
    write_jsonl(tmp_path / "requests.jsonl", requests)
    write_jsonl(tmp_path / "results.jsonl", results)
    return tmp_path


ASK: dict[str, Any] = {"custom_id": "a", "params": {
    "model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "q"}]}}


def test_expired_and_errored_lines_are_unusable_saying_why(tmp_path: Path) -> None:
    other = {**ASK, "custom_id": "b", "params": {**ASK["params"], "max_tokens": 9}}
    loaded = load([group(tmp_path, [ASK, other], [
        {"custom_id": "a", "result": {"type": "expired"}},
        {"custom_id": "b", "result": {"type": "errored", "error": {"type": "error", "error": {
            "type": "overloaded_error", "message": "Overloaded"}}}}])], progress=False)
    instances = [i for e in loaded.index.models[MODEL].entries.values()
                 for i in getattr(e, "unusable", [])]
    assert sorted(str(i.unusable).split(" (saved at ")[0] for i in instances) == [
        "the batch request errored: Overloaded", "the batch request expired"]


def test_a_request_with_no_results_line_is_unusable_not_missing(tmp_path: Path) -> None:
    shutil.copy(DATA / "arith_requests.jsonl", tmp_path / "requests.jsonl")
    write_jsonl(tmp_path / "results.jsonl", [])
    (tmp_path / "results.jsonl").write_text(
        (DATA / "arith_results.jsonl").read_text().split("\n", 1)[1])
    loaded = load([tmp_path], progress=False)
    assert loaded.ctx.skipped["batch request with no output line"] == 1
    assert loaded.index.models[MODEL].unusable_records == 2


@pytest.mark.parametrize(("requests", "results", "where", "message"), [
    ([ASK], [{"custom_id": "z", "result": {"type": "canceled"}}], "results.jsonl:1",
     "field `custom_id`: custom_id 'z' has no request in the batch input files given with it"),
    ([ASK], [{"custom_id": "a", "result": {"type": "succeeded"}}], "results.jsonl:1",
     "field `result.message`: expected the message (an object) of a succeeded request"),
    ([ASK], [{"custom_id": "a", "result": {"type": "done"}}], "results.jsonl:1",
     "field `result.type`: expected succeeded, errored, canceled or expired, got 'done'"),
    ([ASK, ASK], [], "requests.jsonl:2", "field `custom_id`: custom_id 'a' is already used at "),
    ([{"custom_id": "a", "params": "q"}], [], "requests.jsonl:1",
     "field `params`: expected `params` (an object)"),
])
def test_bad_lines_name_file_line_and_field(tmp_path: Path, requests: list[Any],
                                            results: list[Any], where: str,
                                            message: str) -> None:
    with pytest.raises(LoadError) as caught:
        load([group(tmp_path, requests, results)], progress=False)
    assert str(caught.value).startswith(f"{tmp_path / where}: {message}")
