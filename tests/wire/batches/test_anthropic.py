"""Anthropic's Message Batches shapes as pure functions: a create body's requests, checked
with each problem's place; the message_batch; results lines."""

from __future__ import annotations

import orjson
import pytest

from replay_server.errors import BadRequest
from replay_server.wire.batches.anthropic import batch_object, requests_of, result_line
from replay_server.wire.batches.job import Job, Outcome

PARAMS = {"model": "m", "max_tokens": 5, "messages": []}


def test_requests_keep_their_order_and_params() -> None:
    found = requests_of({"requests": [{"custom_id": "a", "params": PARAMS},
                                      {"custom_id": "b", "params": PARAMS}]})
    assert [c for c, _ in found] == ["a", "b"] and orjson.loads(found[0][1]) == PARAMS


@pytest.mark.parametrize(("requests", "param"), [
    ([], "requests"), ([3], "requests.0"), ([{"custom_id": "a b", "params": PARAMS}],
                                            "requests.0.custom_id"),
    ([{"custom_id": "a"}], "requests.0.params"),
    ([{"custom_id": "a", "params": PARAMS}, {"custom_id": "a", "params": PARAMS}],
     "requests.1.custom_id"),
    ([{"custom_id": "a", "params": {**PARAMS, "stream": True}}], "requests.0.params.stream")])
def test_a_bad_request_is_named_by_its_place(requests: list[object], param: str) -> None:
    with pytest.raises(BadRequest) as raised:
        requests_of({"requests": requests})
    assert raised.value.param == param


def test_a_batch_has_ended_and_its_results_are_lines() -> None:
    job = Job("msgbatch_1", 0, "/v1/messages", [Outcome("a", 200, b'{"id":"msg"}', "r"),
                                                 Outcome("b", 400, b'{"type":"error"}', "r")])
    batch = batch_object(job, "http://host:1/")
    assert batch["processing_status"] == "ended" and batch["ended_at"] == "1970-01-01T00:00:00Z"
    assert batch["results_url"] == "http://host:1/v1/messages/batches/msgbatch_1/results"
    assert batch["request_counts"]["succeeded"] == batch["request_counts"]["errored"] == 1
    assert result_line(job.outcomes[0]) == (
        b'{"custom_id":"a","result":{"type":"succeeded","message":{"id":"msg"}}}\n')
    assert orjson.loads(result_line(job.outcomes[1]))["result"]["type"] == "errored"
