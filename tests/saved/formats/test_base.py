"""The builders every reader shares (formats/base.py, records.make_record)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from replay_server.errors import LoadError
from replay_server.paths import CHAT_PATH, COMPLETION_PATH
from replay_server.saved.formats import READERS
from replay_server.saved.formats.base import (
    LoadContext,
    json_lines,
    read_rows,
    strip_litellm_provider,
    synthetic_id,
    text_response,
)
from replay_server.saved.loader import _head
from replay_server.saved.record import make_record, validate
from replay_server.settings import DEFAULT_MAX_LINE

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": True}


def parts(**changes: Any) -> dict[str, Any]:
    return {"endpoint": CHAT_PATH, "model": "m", "request": REQUEST,
            "response": text_response(CHAT_PATH, ["a"], id="r", model="m"),
            "source": {"harness": "h", "instance": 3}, **changes}


def made(**changes: Any) -> Any:
    p = parts(**changes)
    return make_record(p["endpoint"], p["model"], p["request"], p["response"], p["source"],
                       "f.jsonl", 7, unusable=p.get("unusable"))


def error(call: Any) -> str:
    with pytest.raises(LoadError) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize("changes", [
    {"endpoint": "/v1/embeddings"}, {"model": ""}, {"model": None}, {"request": []},
    {"request": {"messages": []}}, {"response": None}, {"response": "x"},
    {"response": {"choices": []}}, {"source": {"instance": [1]}}])
def test_make_record_fails_exactly_as_a_saved_line_would(changes: dict[str, Any]) -> None:
    line = {"replay_record": 1, **parts(**changes)}
    assert error(lambda: made(**changes)) == error(lambda: validate(line, "f.jsonl", 7))
    assert error(lambda: made(**changes)).startswith("f.jsonl:7: field ")


def test_make_record_builds_what_validate_reads() -> None:
    record = made()
    assert record.to_json() == validate(record.to_json(), "f.jsonl", 7).to_json()
    assert "stream" not in record.request
    assert record.source == {"file": "f.jsonl", "line": 7, "harness": "h", "instance": 3}
    assert made(response=text_response(CHAT_PATH, [None], id="r", model="m")).unusable


def test_text_response_serves_what_was_saved_and_null_for_the_rest() -> None:
    body = text_response(CHAT_PATH, ["a", ""], ["stop", None], id="r", model="m",
                         reasonings=[None, "think"])
    assert body == {"id": "r", "object": "chat.completion", "created": None, "model": "m",
                    "usage": None, "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": "a"},
                         "logprobs": None, "finish_reason": "stop"},
                        {"index": 1, "message": {"role": "assistant", "content": "",
                                                 "reasoning": "think"},
                         "logprobs": None, "finish_reason": None}]}
    completion = text_response(COMPLETION_PATH, ["x"], id="r", model="m")
    assert completion["object"] == "text_completion"
    assert completion["choices"] == [{"index": 0, "text": "x", "logprobs": None,
                                      "finish_reason": None}]
    with pytest.raises(ValueError):
        text_response(CHAT_PATH, ["a", "b"], ["stop"], id="r", model="m")


def test_synthetic_ids_are_stable_and_distinct() -> None:
    assert synthetic_id("h", "f", 1) == synthetic_id("h", "f", 1)
    assert synthetic_id("h", "f", 1) != synthetic_id("h", "f", 2)
    assert synthetic_id("h", "f", 1).startswith("replay-h-")


def test_litellm_provider_prefixes_are_stripped_only_when_known() -> None:
    assert strip_litellm_provider("openai/tiny-model") == "tiny-model"
    assert strip_litellm_provider("hosted_vllm/Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert strip_litellm_provider("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert strip_litellm_provider("openai/") == "openai/"


DATA = Path(__file__).parents[2] / "data"
READER_OF = {"evalscope": "evalscope", "inspect_ai": "inspect_ai", "lighteval": "lighteval",
             "lm_eval": "lm-eval", "oe_eval": "oe-eval", "olmo_eval": "olmo-eval",
             "openai_batch": "openai-batch", "anthropic_batch": "anthropic-batch"}


@pytest.mark.parametrize("folder", sorted(READER_OF))
def test_no_reader_claims_another_formats_files(folder: str) -> None:
    claimed = 0
    for path in sorted(p for p in (DATA / folder).rglob("*") if p.is_file()):
        head = _head(path, DEFAULT_MAX_LINE)
        readers = [r.name for r in READERS if r.detect(path, head)]
        assert readers in ([], [READER_OF[folder]]), path
        claimed += bool(readers)
    assert claimed


def test_json_lines_report_every_byte_as_progress_bad_and_blank_lines_too(
        tmp_path: Path) -> None:
    line = orjson.dumps({"a": "x" * 300_000}) + b"\n"
    path = tmp_path / "r.jsonl"
    path.write_bytes(line * 5 + b"\n \n" + b"not json\n" + line * 3 + b'{"cut')
    reported: list[int] = []
    ctx = LoadContext(skip_bad_lines=True, on_progress=reported.append)
    assert [n for n, _ in json_lines(path, ctx)] == [1, 2, 3, 4, 5, 9, 10, 11]
    assert sum(reported) == path.stat().st_size
    assert len(ctx.bad_lines) == 2
    assert 1 < len(reported) < 11  # a megabyte at a time, not line by line


def odd_only(n: int) -> int | None:
    if n % 3 == 0:
        raise LoadError("f.json", None, f"{n} is a multiple of 3", field="n")
    return n if n % 2 else None


def test_every_reader_loop_reports_a_bad_row_and_goes_on_only_when_told() -> None:
    with pytest.raises(LoadError, match="f.json: field `n`: 3 is a multiple of 3"):
        list(read_rows(range(1, 10), odd_only, LoadContext()))
    ctx = LoadContext(skip_bad_lines=True)
    assert list(read_rows(range(1, 10), odd_only, ctx, place=lambda n: f"row {n}")) == [1, 5, 7]
    assert [str(e) for e in ctx.bad_lines] == [
        "f.json (row 3): field `n`: 3 is a multiple of 3",
        "f.json (row 6): field `n`: 6 is a multiple of 3",
        "f.json (row 9): field `n`: 9 is a multiple of 3"]
