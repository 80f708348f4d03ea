"""OpenAI's batch shapes as pure functions: input lines with their numbers and precise
errors, the create body's fields, the Batch object, output and error lines."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from replay_server.errors import BadRequest
from replay_server.wire.batches.job import Job, Outcome
from replay_server.wire.batches.openai import (
    batch_object,
    create_fields,
    read_lines,
    result_files,
)

URL = "/v1/completions"


def line(name: str = "a", **over: object) -> bytes:
    return orjson.dumps({"custom_id": name, "method": "POST", "url": URL,
                         "body": {"prompt": "p"}, **over})


def test_input_lines_keep_their_numbers_and_blank_lines_are_none() -> None:
    lines, problems = read_lines(line() + b"\n\n[1]\n", URL)
    assert [(ln.number, ln.custom_id, ln.body) for ln in lines] == [(1, "a", b'{"prompt":"p"}')]
    assert [(p["line"], p["code"]) for p in problems] == [(3, "invalid_request")]
    assert read_lines(b"\n", URL)[1][0]["code"] == "empty_file"


@pytest.mark.parametrize(("bad", "param"), [
    ({"custom_id": ""}, "custom_id"), ({"method": "GET"}, "method"),
    ({"url": "/v1/chat/completions"}, "url"), ({"body": [1]}, "body"),
    ({"body": {"prompt": "p", "stream": True}}, "body.stream")])
def test_each_bad_line_names_its_field(bad: dict[str, object], param: str) -> None:
    _, [problem] = read_lines(line() + b"\n" + line("b", **bad), URL)
    assert (problem["line"], problem["param"]) == (2, param)


def test_a_custom_id_seen_before_names_the_first_line() -> None:
    _, [problem] = read_lines(line() + b"\n" + line(), URL)
    assert problem["code"] == "duplicate_custom_id" and "line 1" in problem["message"]


def test_the_create_body_is_checked_field_by_field() -> None:
    good = {"input_file_id": "file-1", "endpoint": URL, "completion_window": "24h"}
    assert create_fields(good) == ("file-1", URL, "24h", None)
    bads: list[tuple[dict[str, Any], str]] = [({"endpoint": "/v1/embeddings"}, "endpoint"),
                       ({"completion_window": "1h"}, "completion_window"),
                       ({"metadata": {"k": 1}}, "metadata"), ({"input_file_id": None},
                                                              "input_file_id")]
    for bad, param in bads:
        with pytest.raises(BadRequest) as raised:
            create_fields({**good, **bad})
        assert raised.value.param == param


def test_a_batch_ends_at_its_creation_and_its_lines_embed_the_bodies() -> None:
    job = Job("batch_1", 1000, URL, [Outcome("a", 200, b'{"x": 1}', "req_1"),
                                      Outcome("b", 400, b'{"error":{}}', "req_2")])
    batch = batch_object(job)
    assert batch["status"] == "completed" and batch["completed_at"] == 1000
    assert batch["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    output, errored = result_files(job.outcomes)
    assert b'"body":{"x": 1}' in output and b'"custom_id":"b"' not in output
    assert orjson.loads(errored)["response"]["status_code"] == 400
    job.problems = [{"code": "c", "message": "m", "line": 1, "param": None}]
    assert batch_object(job)["status"] == "failed"
    assert batch_object(job)["errors"]["data"][0]["line"] == 1
