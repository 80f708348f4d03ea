"""Reading saved files: native records, OpenAI Batch files, and every way a file can be bad."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from replay_server import errors
from replay_server.index.index import entry_of
from replay_server.index.loading import load
from replay_server.paths import CHAT_PATH, COMPLETION_PATH
from tests.support import MODEL, chat_record, chat_response, user, write_jsonl

DATA = Path(__file__).parents[1] / "data"
BATCH = DATA / "openai_batch"


def good(text: str = "q", answer: str = "a") -> dict[str, Any]:
    return chat_record(text, chat_response(answer)).to_json()


def load_error(*paths: Path) -> str:
    with pytest.raises(errors.LoadError) as e:
        load(list(paths), progress=False)
    return str(e.value)


def test_native_records_load_from_files_and_nested_directories(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    write_jsonl(tmp_path / "a" / "one.jsonl", [good("q1")])
    write_jsonl(tmp_path / "a" / "b" / "two.jsonl", [good("q2"), good("q3")])
    loaded = load([tmp_path], progress=False)
    assert loaded.index.models[MODEL].records == 3
    assert len(loaded.index.models[MODEL].entries) == 3


def test_blank_lines_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n" + orjson.dumps(good()) + b"\n\n")
    assert load([path], progress=False).index.models[MODEL].records == 1


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(orjson.dumps(good()) + b"\n{not json}\n")
    assert load_error(path).startswith(f"{path}:2: not valid JSON")


def test_a_missing_field_names_file_line_and_field(tmp_path: Path) -> None:
    bad = good()
    del bad["request"]["messages"]
    path = write_jsonl(tmp_path / "r.jsonl", [good(), bad])
    assert load_error(path) == f"{path}:2: field `request.messages`: missing"


def test_a_mistyped_field_says_what_was_expected(tmp_path: Path) -> None:
    bad = {**good(), "model": 3}
    path = write_jsonl(tmp_path / "r.jsonl", [bad])
    assert load_error(path) == f"{path}:1: field `model`: expected a string, got an integer"


def test_a_truncated_last_line_is_named_not_dropped(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    line = orjson.dumps(good())
    path.write_bytes(line + b"\n" + line[: len(line) // 2])
    message = load_error(path)
    assert message.startswith(f"{path}:2: the last line is cut short")


def test_a_complete_last_line_without_newline_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(orjson.dumps(good()))
    assert load([path], progress=False).index.models[MODEL].records == 1


def test_non_utf8_bytes_are_a_precise_error(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(orjson.dumps(good()).replace(b'"q"', b'"\xff\xfe"') + b"\n")
    assert load_error(path).startswith(f"{path}:1: not valid JSON")


def test_a_newer_record_version_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{**good(), "replay_record": 2}])
    assert "record format version 2 is not supported" in load_error(path)


def test_a_batched_prompt_in_a_native_record_is_refused(tmp_path: Path) -> None:
    record = {"replay_record": 1, "endpoint": COMPLETION_PATH, "model": MODEL,
              "request": {"prompt": ["a", "b"]}, "response": None, "unusable": "x"}
    path = write_jsonl(tmp_path / "r.jsonl", [record])
    assert "one prompt" in load_error(path)


def test_skip_bad_lines_loads_the_rest_and_reports(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(orjson.dumps(good("q1")) + b"\n[1]\n" + orjson.dumps(good("q2")) + b"\n")
    loaded = load([path], skip_bad_lines=True, progress=False)
    assert loaded.index.models[MODEL].records == 2
    assert [str(e) for e in loaded.ctx.bad_lines] == [
        f"{path}:2: expected a JSON object, got a list"]


def test_empty_directory_and_missing_path_are_errors(tmp_path: Path) -> None:
    assert "no saved generations found" in load_error(tmp_path)
    assert "no such file or directory" in load_error(tmp_path / "nope")


def test_an_explicit_file_in_no_known_format_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    assert "not a saved-run format" in load_error(path)


def test_unknown_files_inside_a_directory_are_ignored_and_listed(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "r.jsonl", [good()])
    (tmp_path / "README.md").write_text("notes\n")
    loaded = load([tmp_path], progress=False)
    assert loaded.plan.ignored == [tmp_path / "README.md"]


def test_a_symlink_loop_terminates(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "r.jsonl", [good()])
    os.symlink(tmp_path, tmp_path / "loop")
    assert load([tmp_path], progress=False).index.models[MODEL].records == 1


def test_saved_files_are_not_modified(tmp_path: Path) -> None:
    shutil.copytree(BATCH, tmp_path / "b")
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (tmp_path / "b").iterdir()}
    load([tmp_path / "b"], progress=False)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in before} == before


# OpenAI Batch files

def test_batch_input_and_output_join_on_custom_id() -> None:
    loaded = load([BATCH], progress=False)
    chat = loaded.index.models["gpt-4o-mini"]
    completion = loaded.index.models["gpt-3.5-turbo-instruct"]
    assert chat.records == 5 and chat.samples == 4 and chat.unusable_records == 2
    assert completion.records == 1
    assert loaded.ctx.skipped["failed batch line"] == 2
    assert loaded.ctx.skipped["endpoint not replayed (/v1/embeddings)"] == 1


def test_batch_files_given_as_files_join_too() -> None:
    loaded = load([BATCH / "batch_output.jsonl", BATCH / "batch_input.jsonl"], progress=False)
    assert loaded.index.models["gpt-4o-mini"].records == 5


def test_a_batch_input_with_no_output_line_is_unusable_not_missing(tmp_path: Path) -> None:
    lines = (BATCH / "batch_output.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "in.jsonl").write_bytes((BATCH / "batch_input.jsonl").read_bytes())
    (tmp_path / "out.jsonl").write_bytes(b"".join(lines[1:]))
    loaded = load([tmp_path], progress=False)
    assert loaded.ctx.skipped["batch request with no output line"] == 1
    assert loaded.index.models["gpt-4o-mini"].unusable_records == 3


def test_a_batch_output_without_its_input_is_an_error(tmp_path: Path) -> None:
    shutil.copy(BATCH / "batch_output.jsonl", tmp_path / "out.jsonl")
    first = orjson.loads((BATCH / "batch_input.jsonl").read_bytes().splitlines()[0])
    write_jsonl(tmp_path / "in.jsonl", [first])
    message = load_error(tmp_path)
    assert message == (f"{tmp_path / 'out.jsonl'}:1: field `custom_id`: custom_id "
                       "'request-2' has no request in the batch input files given with it")


def test_two_batches_reusing_custom_ids_load_as_separate_arguments(tmp_path: Path) -> None:
    shutil.copytree(BATCH, tmp_path / "one")
    shutil.copytree(BATCH, tmp_path / "two")
    assert "already used" in load_error(tmp_path)
    loaded = load([tmp_path / "one", tmp_path / "two"], progress=False)
    assert loaded.index.models["gpt-4o-mini"].records == 10


def test_batched_completion_prompts_in_a_batch_line_split_per_prompt(tmp_path: Path) -> None:
    body = {"model": "m", "prompt": ["p1", "p2"], "n": 2}
    choices = [{"index": i, "text": t, "finish_reason": "stop", "logprobs": None}
               for i, t in enumerate(["a1", "a2", "b1", "b2"])]
    write_jsonl(tmp_path / "in.jsonl", [{"custom_id": "c", "method": "POST",
                                          "url": COMPLETION_PATH, "body": body}])
    write_jsonl(tmp_path / "out.jsonl", [{"id": "x", "custom_id": "c", "error": None,
                                           "response": {"status_code": 200, "body": {
                                               "id": "cmpl", "object": "text_completion",
                                               "choices": choices, "usage": None}}}])
    run = load([tmp_path], progress=False).index.models["m"]
    assert run.records == 2 and run.samples == 4


def test_records_keep_where_they_came_from(tmp_path: Path) -> None:
    record = chat_record(user("q"), chat_response("a")).to_json()
    del record["source"]
    path = write_jsonl(tmp_path / "r.jsonl", [record])
    entry = next(iter(load([path], progress=False).index.models[MODEL].entries.values()))
    assert entry_of(entry).instances[0].where == f"{path}:1"
    assert CHAT_PATH in record["endpoint"]


def test_an_unreadable_file_is_named_and_can_be_skipped(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "good.jsonl", [good()])
    os.symlink(tmp_path / "gone.jsonl", tmp_path / "dangling.jsonl")
    assert load_error(tmp_path) == f"{tmp_path / 'dangling.jsonl'}: cannot read: " \
                                   "No such file or directory"
    loaded = load([tmp_path], skip_bad_lines=True, progress=False)
    assert loaded.index.models[MODEL].records == 1
    assert [e.file for e in loaded.ctx.bad_lines] == [str(tmp_path / "dangling.jsonl")]


def test_huge_lines_load(tmp_path: Path) -> None:
    big = chat_record("q" * 3_000_000, chat_response("a" * 3_000_000)).to_json()
    path = write_jsonl(tmp_path / "big.jsonl", [big, good("small")])
    assert load([path], progress=False).index.models[MODEL].records == 2


def test_duplicate_records_are_one_generation_served_any_number_of_times(
        tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "dup.jsonl", [good(), good(), good()])
    index = load([path], progress=False).index
    assert index.models[MODEL].records == 3 and len(index.models[MODEL].entries) == 1
    assert entry_of(next(iter(index.models[MODEL].entries.values()))).uniform
