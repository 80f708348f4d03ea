"""/v1/responses end to end: record through the proxy with openai-python, replay the
recording, and get the same answers, ids and streams; the record format and the misses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from replay_server.errors import LoadError
from replay_server.index.loading import load
from replay_server.paths import RESPONSES_PATH
from replay_server.saved.record import validate
from replay_server.saved.writer import RecordWriter
from replay_server.settings import Settings
from replay_server.web.recorder import Recorder, create_record_app
from replay_server.wire.responses.stream_in import aggregate
from replay_server.wire.responses.stream_out import events_for
from tests.fakemodel.server import create_app as fake_model
from tests.support import assert_error, docs_page, running, serving, write_jsonl

MODEL = "tiny-model"
CALCULATOR: Any = {"type": "function", "name": "calculator", "description": "Evaluates arithmetic.",
                   "parameters": {"type": "object",
                                  "properties": {"expression": {"type": "string"}},
                                  "required": ["expression"]}}
TOOL_QUESTION = "Please use the calculator: what is 6 * 7?"


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running(fake_model([MODEL])) as url:
        yield url


@pytest.fixture
def recorded(upstream: str, tmp_path: Path) -> Iterator[tuple[str, Recorder, Path]]:
    out = tmp_path / "run.jsonl"
    rec = Recorder(upstream, RecordWriter(out))
    with running(create_record_app(rec)) as url:
        yield url, rec, out
    rec.writer.close()


def events(stream: Any) -> list[dict[str, Any]]:
    return [e.model_dump() for e in stream]


def session(client: openai.OpenAI) -> dict[str, Any]:
    """What an agent does over the Responses API: plain and streamed answers, a tool call
    and its follow-up, a chain by previous_response_id, a retrieve, sampled repeats."""
    out: dict[str, Any] = {}
    out["plain"] = client.responses.create(model=MODEL, input="What is 12 + 7?",
                                           instructions="Be brief.", temperature=0).model_dump()
    out["stream"] = events(client.responses.create(model=MODEL, input="What is 5 + 8?",
                                                   temperature=0, stream=True))
    first = client.responses.create(model=MODEL, input=TOOL_QUESTION, tools=[CALCULATOR],
                                    temperature=0)
    out["tool"] = first.model_dump()
    called = [o for o in first.output if o.type == "function_call"][0]
    follow: Any = [{"role": "user", "content": TOOL_QUESTION},
              *[o.model_dump(exclude_none=True) for o in first.output],
              {"type": "function_call_output", "call_id": called.call_id, "output": "42"}]
    out["follow_up"] = client.responses.create(model=MODEL, input=follow, tools=[CALCULATOR],
                                               temperature=0).model_dump()
    out["tool_stream"] = events(client.responses.create(
        model=MODEL, input="Use the calculator: what is 3 * 4?", tools=[CALCULATOR],
        temperature=0, stream=True))
    turn = client.responses.create(model=MODEL, input="What is 2 + 2?", temperature=0)
    out["chain"] = client.responses.create(model=MODEL, input="And 3 + 3?", temperature=0,
                                           previous_response_id=turn.id).model_dump()
    out["retrieve"] = client.responses.retrieve(turn.id).model_dump()
    with client.responses.stream(model=MODEL, input="What is 9 + 9?", temperature=0) as s:
        out["helper"] = s.get_final_response().model_dump()
    out["repeats"] = [client.responses.create(model=MODEL, input="What is 4 + 4?",
                                              temperature=0.9).model_dump() for _ in range(3)]
    return out


@pytest.mark.slow
def test_record_then_replay_gives_identical_responses(
        recorded: tuple[str, Recorder, Path]) -> None:
    url, rec, out = recorded
    with openai.OpenAI(base_url=url, api_key="sk-not-saved") as client:
        original = session(client)
    assert rec.counts["recorded"] == 11 and rec.counts["forwarded"] == 1  # the retrieve
    assert len({str(r["output"]) for r in original["repeats"]}) > 1, "repeats should differ"
    with serving([out]) as replay_url, openai.OpenAI(base_url=replay_url, api_key="x",
                                                      max_retries=0) as client:
        replayed = session(client)
        status = httpx.get(replay_url.removesuffix("/v1") + "/replay/status").json()
    assert replayed == original
    assert status["totals"]["unused_samples"] == 0
    assert b"sk-not-saved" not in out.read_bytes()


def test_a_recorded_stream_is_replayed_byte_for_byte(recorded: tuple[str, Recorder, Path]
                                                     ) -> None:
    url, _, out = recorded
    body = {"model": MODEL, "input": TOOL_QUESTION, "tools": [CALCULATOR], "stream": True}
    sent = httpx.post(url + "/responses", json=body).content
    saved = orjson.loads(out.read_bytes())
    assert "".join(saved["stream"]).encode() == sent
    with serving([out]) as replay_url:
        assert httpx.post(replay_url + "/responses", json=body).content == sent
        plain = httpx.post(replay_url + "/responses", json={**body, "stream": False})
    assert plain.json() == aggregate(sent).response == saved["response"]


def test_a_chat_stream_is_replayed_with_the_deltas_it_was_sent_with(
        recorded: tuple[str, Recorder, Path]) -> None:
    url, _, out = recorded
    body = {"model": MODEL, "messages": [{"role": "user", "content": "What is 1 + 1?"}],
            "stream": True, "stream_options": {"include_usage": True}}
    sent = httpx.post(url + "/chat/completions", json=body).content
    with serving([out]) as replay_url:
        assert httpx.post(replay_url + "/chat/completions", json=body).content == sent
        without = httpx.post(replay_url + "/chat/completions",
                             json={**body, "stream_options": None}).content
    usage = [f for f in sent.split(b"\n\n") if b'"choices": [], "usage": {' in f]
    assert len(usage) == 1  # the same frames, but for the usage chunk
    assert without.split(b"\n\n") == [f for f in sent.split(b"\n\n") if f not in usage]


def test_a_non_streamed_recording_streams_in_small_deltas(
        recorded: tuple[str, Recorder, Path]) -> None:
    url, _, out = recorded
    body = {"model": MODEL, "input": "What is 12 + 7?", "instructions": "Be brief."}
    saved = httpx.post(url + "/responses", json=body).json()
    with serving([out]) as replay_url:
        sent = httpx.post(replay_url + "/responses", json={**body, "stream": True}).content
    assert sent == b"".join(events_for(saved))
    assert sent.count(b"response.output_text.delta") > 2


def test_batched_completions_replay_the_batch_usage(recorded: tuple[str, Recorder, Path]
                                                    ) -> None:
    url, _, out = recorded
    body: dict[str, Any] = {"model": MODEL, "prompt": [f"What is {i} + 1?" for i in range(3)],
                            "max_tokens": 8}
    original = httpx.post(url + "/completions", json=body).json()
    assert original["usage"] is not None
    with serving([out]) as replay_url:
        assert httpx.post(replay_url + "/completions", json=body).json() == original
        part = httpx.post(replay_url + "/completions",
                          json={**body, "prompt": body["prompt"][:2]}).json()
    assert part["usage"] is None  # a part of the batch: its usage cannot be split


def test_the_recorder_forwards_every_other_path_untouched(
        recorded: tuple[str, Recorder, Path]) -> None:
    url, rec, out = recorded
    missing = httpx.post(url + "/embeddings", json={"model": MODEL, "input": "x"})
    assert (missing.status_code, missing.text) == (404, "Not Found")  # the upstream's own
    assert httpx.get(url + "/responses/resp_unknown").status_code == 404
    assert httpx.get(url.removesuffix("/v1") + "/version").json() == {"version": "0.33.0"}
    assert rec.counts["forwarded"] == 3 and out.read_bytes() == b""


def test_a_chain_replays_only_from_the_saved_turn(recorded: tuple[str, Recorder, Path]
                                                  ) -> None:
    url, _, out = recorded
    with openai.OpenAI(base_url=url, api_key="x") as client:
        first = client.responses.create(model=MODEL, input="What is 2 + 2?")
        client.responses.create(model=MODEL, input="And 3 + 3?", previous_response_id=first.id)
    with serving([out]) as replay_url:
        other = httpx.post(replay_url + "/responses", json={
            "model": MODEL, "input": "And 3 + 3?", "previous_response_id": "resp_elsewhere"})
        error = assert_error(other, 400, "replay_no_match", "previous_response_id")
        assert "resp_elsewhere" in error["message"]
        changed = httpx.post(replay_url + "/responses", json={
            "model": MODEL, "input": "And 3 + 4?", "previous_response_id": first.id})
        error = assert_error(changed, 400, "replay_no_match", "input")
        assert "input item 0 (user), character 8: the text differs" in error["message"]
        assert "3 + 4" not in error["message"]
        misses = httpx.get(replay_url.removesuffix("/v1") + "/replay/misses").json()
        assert '"And 3 + 4?"' in misses["misses"][-1]["difference_quoted"]
        gone = httpx.get(replay_url + "/responses/resp_elsewhere")
        assert_error(gone, 404, 404, "response_id")


def saved(output_text: str, rid: str = "resp_1", **request: Any) -> dict[str, Any]:
    response = {"id": rid, "object": "response", "status": "completed", "model": MODEL,
                "output": [{"id": "msg_1", "type": "message", "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": output_text,
                                         "annotations": []}]}],
                "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}}
    return {"replay_record": 1, "endpoint": RESPONSES_PATH, "model": MODEL,
            "request": {"model": MODEL, "input": "hi", **request}, "response": response}


def test_responses_records_are_checked_with_file_and_line(tmp_path: Path) -> None:
    record = validate(saved("Hello there."), "f.jsonl", 3)
    assert record.unusable is None and record.stream is None
    failed = saved("x")
    failed["response"]["status"] = "failed"
    assert "status is 'failed'" in (validate(failed, "f", 1).unusable or "")
    no_input = saved("x")
    del no_input["request"]["input"]
    with pytest.raises(LoadError, match=r"f.jsonl:7: field `request.input`"):
        validate(no_input, "f.jsonl", 7)
    frames = [f.decode() for f in events_for(saved("Hello there.")["response"])]
    assert validate({**saved("Hello there."), "stream": frames}, "f", 1).stream == frames
    with pytest.raises(LoadError, match=r"field `stream`: expected a non-empty list"):
        validate({**saved("x"), "stream": "data: x"}, "f", 2)


def test_strict_mode_compares_the_responses_sampling_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [saved("4", temperature=0,
                                                      max_output_tokens=16)])
    with serving([path], Settings(strict=True)) as url:
        same = httpx.post(url + "/responses", json={"model": MODEL, "input": "hi",
                                                    "temperature": 0.0,
                                                    "max_output_tokens": 16})
        assert same.status_code == 200
        other = httpx.post(url + "/responses", json={"model": MODEL, "input": "hi",
                                                     "temperature": 0.5,
                                                     "max_output_tokens": 16})
        assert_error(other, 400, "replay_params_mismatch", "temperature")


def test_a_turn_whose_earlier_turn_was_not_saved_is_unusable(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [saved("4", rid="resp_2",
                                                      previous_response_id="resp_gone")])
    run = load([path], progress=False).index.models[MODEL]
    assert run.unusable_records == 1
    with serving([path]) as url:
        r = httpx.post(url + "/responses", json={"model": MODEL, "input": "hi",
                                                 "previous_response_id": "resp_gone"})
    assert_error(r, 400, "replay_no_match", "previous_response_id")


def test_the_index_file_serves_responses_and_their_chains(
        recorded: tuple[str, Recorder, Path], tmp_path: Path) -> None:
    from replay_server.index import file as index_file

    url, _, out = recorded
    with openai.OpenAI(base_url=url, api_key="x") as client:
        original = session(client)
    idx = tmp_path / "run.idx"
    index_file.write(load([out], progress=False), idx)
    with serving([idx]) as replay_url, openai.OpenAI(base_url=replay_url, api_key="x",
                                                      max_retries=0) as client:
        assert session(client) == original
        stream = httpx.post(replay_url + "/responses", json={
            "model": MODEL, "input": "What is 5 + 8?", "temperature": 0, "stream": True})
    assert stream.content == "".join(next(
        orjson.loads(line) for line in out.read_bytes().splitlines()
        if b"5 + 8" in line)["stream"]).encode()


def test_openai_batch_files_of_the_responses_api_are_read(tmp_path: Path) -> None:
    body = saved("Hello there.")
    write_jsonl(tmp_path / "in.jsonl", [{"custom_id": "a", "method": "POST",
                                         "url": RESPONSES_PATH, "body": body["request"]}])
    write_jsonl(tmp_path / "out.jsonl", [{"id": "b1", "custom_id": "a", "error": None,
                                          "response": {"status_code": 200,
                                                       "body": body["response"]}}])
    with serving([tmp_path]) as url:
        got = httpx.post(url + "/responses", json=body["request"])
    assert got.json() == body["response"]


def test_the_docs_list_every_responses_field_as_the_code_classifies_it() -> None:
    from replay_server.paths import RESPONSES_PATH
    from replay_server.wire.families import fields_table

    assert fields_table(RESPONSES_PATH) in docs_page("reference/fields.md")


@pytest.mark.slow
def test_convert_and_the_index_file_keep_frames_and_batch_usage(
        recorded: tuple[str, Recorder, Path], tmp_path: Path) -> None:
    from replay_server.commands.convert import convert_paths
    from replay_server.index import file as index_file

    url, _, out = recorded
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "What is 1 + 1?"}],
            "stream": True}
    batch = {"model": MODEL, "prompt": ["What is 1 + 1?", "What is 2 + 1?"], "max_tokens": 8}
    responses = {"model": MODEL, "input": "What is 3 + 3?", "stream": True}
    sent = [httpx.post(url + "/chat/completions", json=chat).content,
            httpx.post(url + "/completions", json=batch).content,
            httpx.post(url + "/responses", json=responses).content]
    converted = tmp_path / "converted.jsonl"
    convert_paths([out], converted, progress=False)
    idx = tmp_path / "run.idx"
    index_file.write(load([converted], progress=False), idx)
    for saved in (converted, idx):
        with serving([saved]) as replay_url:
            assert [httpx.post(replay_url + "/chat/completions", json=chat).content,
                    httpx.post(replay_url + "/completions", json=batch).content,
                    httpx.post(replay_url + "/responses", json=responses).content] == sent


def test_malformed_responses_requests_get_400_naming_the_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [saved("4")])
    with serving([path]) as url:
        assert_error(httpx.post(url + "/responses", json={"model": MODEL}), 400, 400, "input")
        assert_error(httpx.post(url + "/responses", json={"model": MODEL, "input": 3}),
                     400, 400, "input")
        assert_error(httpx.post(url + "/responses", json={"model": MODEL, "input": "hi",
                                                          "tools": {}}), 400, 400, "tools")
        assert_error(httpx.get(url + "/responses"), 405, 405)
        assert_error(httpx.post(url + "/responses/resp_1/cancel"), 400, 400, "response_id")
        assert httpx.get(url + "/responses/resp_1").json() == saved("4")["response"]
        assert "data: " in httpx.get(url + "/responses/resp_1?stream=true").text


def test_the_start_up_snippet_replays_a_saved_responses_prompt(tmp_path: Path) -> None:
    import shlex

    from replay_server.commands.serve import open_run, snippet_lines

    record = saved("4", instructions="Be brief.", tools=[CALCULATOR],
                   text={"format": {"type": "json_schema", "name": "n", "schema": {
                       "type": "object", "properties": {}}}})
    path = write_jsonl(tmp_path / "run.jsonl", [record])
    with serving([path]) as url:
        lines = snippet_lines(open_run([path], Settings()), url)
        curl = next(line for line in lines if "/v1/responses" in line)
        body = shlex.split(curl)[-1]
        assert httpx.post(url + "/responses", content=body).status_code == 200
