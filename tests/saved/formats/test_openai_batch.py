"""The OpenAI Batch reader: input and output files joined on custom_id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replay_server.errors import LoadError
from replay_server.index.loading import load
from tests.support import write_jsonl

INPUT = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "m", "messages": [{"role": "user", "content": "q"}]}}


def output(response: Any) -> dict[str, Any]:
    return {"id": "batch_req_1", "custom_id": "a", "response": response, "error": None}


def test_a_status_200_line_without_a_body_is_a_bad_line(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in.jsonl", [INPUT])
    write_jsonl(tmp_path / "out.jsonl", [output({"status_code": 200, "request_id": "r"})])
    with pytest.raises(LoadError) as caught:
        load([tmp_path], progress=False)
    assert str(caught.value) == (f"{tmp_path / 'out.jsonl'}:1: field `response.body`: "
                                 "expected the response body (an object) of a status 200 line")


def test_a_bad_batch_of_prompts_yields_none_of_its_prompts(tmp_path: Path) -> None:
    request = {**INPUT, "url": "/v1/completions", "body": {"model": "m", "prompt": ["a", "b"]}}
    choices = [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate("xyz")]
    write_jsonl(tmp_path / "in.jsonl", [request])
    write_jsonl(tmp_path / "out.jsonl", [output({"status_code": 200, "body": {
        "id": "c", "object": "text_completion", "choices": choices}})])
    loaded = load([tmp_path], progress=False, skip_bad_lines=True)
    assert not loaded.index.models
    assert [(e.line, e.field) for e in loaded.ctx.bad_lines] == [(1, "response.body.choices")]
