"""Faithful or loud: each way a replay could serve a wrong answer, or fail quietly, that a
hostile review found (one test per finding, named after it)."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from replay_server import errors
from replay_server.errors import LoadError
from replay_server.index.loading import load
from replay_server.index.samples import Rules
from replay_server.paths import CHAT_PATH, COMPLETION_PATH
from replay_server.replay.replayer import Replayer
from replay_server.saved.writer import RecordWriter
from replay_server.settings import Settings
from replay_server.web.app import create_app
from replay_server.web.recorder import Recorder, create_record_app
from replay_server.wire import keys
from replay_server.wire.chat import request as chat_request
from replay_server.wire.chat.fields import TABLE as CHAT
from replay_server.wire.completions import request as completions_request
from replay_server.wire.completions.fields import TABLE as COMPLETIONS
from replay_server.wire.families import fields_table
from tests.support import (
    CLI,
    MODEL,
    ROOT,
    assert_error,
    build,
    chat_record,
    chat_response,
    completion_response,
    docs_page,
    running,
    serving,
    spawn,
    user,
    wait_for,
    write_jsonl,
)


def chat_key(**request: Any) -> bytes:
    request.setdefault("messages", user("q"))
    return keys.key_of(chat_request.prompt(request))


def completion_key(**request: Any) -> bytes:
    request.setdefault("prompt", "q")
    return keys.key_of(completions_request.prompt(request["prompt"], request))


def handle(replayer: Replayer, endpoint: str = CHAT_PATH, **body: Any) -> dict[str, Any]:
    body.setdefault("model", MODEL)
    if endpoint == CHAT_PATH:
        body.setdefault("messages", user("q"))
    result: dict[str, Any] = orjson.loads(replayer.handle(endpoint, orjson.dumps(body)).body)
    return result


# --- 1. every field that changes the generation is in the key -------------------------

# A value that is not the field's "unset" value, per JSON type (and per field where needed).
SAMPLE = {"string": "x", "boolean": True, "number": 0.5, "integer": 3, "object": {"a": 1},
          "array": ["x"]}
SPECIAL = {"echo": True, "add_generation_prompt": False, "include_reasoning": False,
           "skip_special_tokens": False, "spaces_between_special_tokens": False,
           "add_special_tokens": True,
           "parallel_tool_calls": False, "tool_choice": "required",
           "function_call": "none", "response_format": {"type": "json_object"},
           "tools": [{"type": "function", "function": {"name": "f"}}],
           "functions": [{"name": "f"}], "logit_bias": {"50256": -100},
           "structured_outputs": {"regex": "[0-9]+"}}
TOOLS = [{"type": "function", "function": {"name": "g"}}]


def keyed_fields(table: keys.Table) -> list[str]:
    return [f.name for f in table.fields
            if f.role == keys.KEY and f.name not in ("messages", "prompt")]


def value_for(table: keys.Table, name: str) -> Any:
    if name == "add_special_tokens":
        return table is CHAT  # the opposite of each endpoint's default
    return SPECIAL.get(name, SAMPLE[table.by_name[name].types[0]])


@pytest.mark.parametrize("name", keyed_fields(CHAT))
def test_each_chat_key_field_changes_the_key(name: str) -> None:
    base = {"tools": TOOLS} if name in ("tool_choice", "parallel_tool_calls") else {}
    base = {"functions": [{"name": "g"}]} if name == "function_call" else base
    assert chat_key(**base, **{name: value_for(CHAT, name)}) != chat_key(**base), name


@pytest.mark.parametrize("name", keyed_fields(COMPLETIONS))
def test_each_completion_key_field_changes_the_key(name: str) -> None:
    assert completion_key(**{name: value_for(COMPLETIONS, name)}) != completion_key(), name


def test_the_issue_s_fields_are_all_key_fields() -> None:
    chat = set(keyed_fields(CHAT))
    assert {"functions", "function_call", "chat_template", "chat_template_kwargs",
            "add_generation_prompt", "continue_final_message", "documents", "guided_choice",
            "guided_json", "guided_regex", "guided_grammar", "structured_outputs",
            "parallel_tool_calls", "echo"} <= chat
    assert {"suffix", "echo"} <= set(keyed_fields(COMPLETIONS))


@pytest.mark.parametrize("name", [f.name for f in CHAT.fields if f.role != keys.KEY])
def test_strict_and_ignored_fields_never_change_the_key(name: str) -> None:
    assert chat_key(**{name: value_for(CHAT, name)}) == chat_key()


def test_fields_set_to_their_unset_value_do_not_change_the_key() -> None:
    assert chat_key(add_generation_prompt=True, continue_final_message=False,
                    chat_template_kwargs={}, documents=[], add_special_tokens=False,
                    functions=[], parallel_tool_calls=True) == chat_key()
    assert chat_key(tool_choice="none", parallel_tool_calls=False,
                    function_call="auto") == chat_key()  # no tools: they mean nothing
    assert completion_key(echo=False, add_special_tokens=True, suffix=None) == completion_key()


def test_a_request_differing_only_in_a_vllm_field_is_a_miss_even_without_strict() -> None:
    saved = [chat_record("q", chat_response("thinking... 4"),
                         chat_template_kwargs={"enable_thinking": True})]
    r = Replayer(build(saved), Rules())
    assert handle(r, chat_template_kwargs={"enable_thinking": True})["choices"][0]
    with pytest.raises(errors.NoMatch, match="chat_template_kwargs"):
        handle(r, chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(errors.NoMatch):
        handle(r)


def test_unknown_fields_are_compared_in_strict_mode_only() -> None:
    saved = [chat_record("q", chat_response("a"), some_new_knob=1)]
    assert handle(Replayer(build(saved), Rules()), some_new_knob=2)
    with pytest.raises(errors.ParamsMismatch, match="some_new_knob"):
        handle(Replayer(build(saved), Rules(strict=True)), some_new_knob=2)


def test_the_docs_field_table_is_the_code_s() -> None:
    assert fields_table(CHAT_PATH, COMPLETION_PATH) in docs_page("reference/fields.md")


# --- 2. nulls and key order inside JSON Schemas are content -----------------------------

def schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}


def tool(parameters: dict[str, Any], **function: Any) -> list[dict[str, Any]]:
    return [{"type": "function",
             "function": {"name": "f", "parameters": parameters, **function}}]


def test_nulls_inside_a_schema_are_content() -> None:
    assert chat_key(response_format=schema_format({"const": None})) != \
        chat_key(response_format=schema_format({}))
    with_default = {"type": "object", "properties": {"x": {"type": "string", "default": None}}}
    without = {"type": "object", "properties": {"x": {"type": "string"}}}
    assert chat_key(tools=tool(with_default)) != chat_key(tools=tool(without))
    assert chat_key(guided_json={"const": None}) != chat_key(guided_json={})


def test_nulls_where_the_api_means_unset_are_still_dropped() -> None:
    assert chat_key(tools=tool({}, description=None, strict=None)) == chat_key(tools=tool({}))
    assert chat_key(response_format={**schema_format({}), "x": None}) == \
        chat_key(response_format=schema_format({}))


def test_key_order_inside_a_schema_is_content_and_outside_is_not() -> None:
    ab = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    ba = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "string"}}}
    assert chat_key(tools=tool(ab)) != chat_key(tools=tool(ba))
    swapped = [{"function": {"parameters": ab, "name": "f"}, "type": "function"}]
    assert chat_key(tools=swapped) == chat_key(tools=tool(ab))


# --- 3. two runs converted separately never merge ---------------------------------------

def batch_run(folder: Path, answer: str) -> None:
    folder.mkdir()
    body = {"model": MODEL, "messages": user("Capital of France?")}
    write_jsonl(folder / "batch_input.jsonl", [
        {"custom_id": "r1", "method": "POST", "url": CHAT_PATH, "body": body}])
    write_jsonl(folder / "batch_output.jsonl", [
        {"id": "b1", "custom_id": "r1", "error": None,
         "response": {"status_code": 200, "body": chat_response(answer)}}])


def test_two_runs_converted_separately_stay_two_instances(tmp_path: Path) -> None:
    for name, answer in (("one", "Paris"), ("two", "Lyon")):
        batch_run(tmp_path / name, answer)
        subprocess.run([*CLI, "convert", ".", "-o", f"../{name}.jsonl"], cwd=tmp_path / name,
                       check=True, capture_output=True)
    converted = [tmp_path / "one.jsonl", tmp_path / "two.jsonl"]
    sources = {orjson.loads(p.read_bytes())["source"]["file"] for p in converted}
    assert len(sources) == 1  # the same relative source file in both, as in the report
    with serving(converted) as url:
        r = httpx.post(url + "/chat/completions",
                       json={"model": MODEL, "messages": user("Capital of France?")})
        assert_error(r, 400, "replay_ambiguous")


def test_two_recording_sessions_in_one_file_stay_two_instances() -> None:
    records = [chat_record("q", chat_response(t), file="rec.jsonl", line=i)
               for i, t in enumerate(["a", "b"], start=1)]
    for record, run in zip(records, ["record-1", "record-2"], strict=True):
        record.source["run"] = run
    with pytest.raises(errors.Ambiguous):
        handle(Replayer(build(records), Rules()))


def test_the_same_file_given_twice_is_read_once(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [chat_record("q", chat_response("a"))])
    assert load([path, path], progress=False).index.models[MODEL].records == 1


# --- 4. the recorder saves only what reached the client ---------------------------------

def slow_upstream(release: threading.Event, body: dict[str, Any]) -> Starlette:
    async def chat(request: Request) -> Response:
        await request.body()
        import asyncio
        await asyncio.to_thread(release.wait, 30)
        return Response(orjson.dumps(body), media_type="application/json")
    return Starlette(routes=[Route(CHAT_PATH, chat, methods=["POST"])])


@pytest.mark.slow
def test_an_exchange_whose_client_gave_up_is_not_saved(tmp_path: Path) -> None:
    release = threading.Event()
    with running(slow_upstream(release, chat_response("late"))) as up:
        rec = Recorder(up, RecordWriter(tmp_path / "run.jsonl"))
        with running(create_record_app(rec)) as url:
            with pytest.raises(httpx.TimeoutException):
                httpx.post(url + "/chat/completions", json={"model": MODEL,
                           "messages": user("q")}, timeout=0.5)
            deadline = time.monotonic() + 10
            while rec.counts["abandoned"] < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            release.set()
            time.sleep(0.3)
        rec.writer.close()
    assert rec.counts["abandoned"] == 1 and rec.counts["recorded"] == 0
    assert (tmp_path / "run.jsonl").read_bytes() == b""


# --- 5. generation identity compares the whole saved choice -----------------------------

def test_reasoning_null_beside_reasoning_content_is_not_the_same_generation() -> None:
    records = [chat_record("q", chat_response("4", reasoning=None, reasoning_content=why),
                           instance=i, line=i) for i, why in enumerate(["A", "B"], start=1)]
    with pytest.raises(errors.Ambiguous):
        handle(Replayer(build(records), Rules()))


def test_any_differing_field_of_the_choice_makes_another_generation() -> None:
    one = chat_response("4")
    two = chat_response("4")
    two["choices"][0]["logprobs"] = {"content": [{"token": "4", "logprob": -0.1}]}
    records = [chat_record("q", r, instance=i, line=i) for i, r in enumerate([one, two])]
    with pytest.raises(errors.Ambiguous):
        handle(Replayer(build(records), Rules()))


# --- 6. an alias never shadows a served model -------------------------------------------

def test_a_wildcard_alias_never_answers_for_a_served_model() -> None:
    records = [chat_record("q", chat_response("from A"), model="A"),
               chat_record("q", chat_response("from B"), model="B", line=2)]
    r = Replayer(build(records, **{"*": "A"}), Rules())
    assert handle(r, model="B")["choices"][0]["message"]["content"] == "from B"
    assert handle(r, model="other")["choices"][0]["message"]["content"] == "from A"


def test_an_alias_named_like_a_served_model_is_refused() -> None:
    records = [chat_record("q", chat_response("a"), model="A"),
               chat_record("q", chat_response("b"), model="B", line=2)]
    with pytest.raises(ValueError, match="never shadows"):
        build(records, B="A")


# --- 7, 8, 19, 22. run: every failure fails it, also when swallowed -------------------

RUN = [*CLI, "run", "examples/", "--log-level", "warning", "--allow-unused"]
SWALLOW = """
import httpx, os
base = os.environ["OPENAI_BASE_URL"]
def post(path, **kw):
    try:
        return httpx.post(base + path, timeout=30, **kw).status_code
    except httpx.HTTPError as e:
        return type(e).__name__
"""


def run_cli(args: list[str], script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*args, "--", sys.executable, "-c", SWALLOW + script],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.slow
@pytest.mark.http
@pytest.mark.parametrize("script, status", [
    ("print(post('/chat/completions', content=b'x' * 300))", "413"),
    ("print(post('/responses', json={'model': 'm', 'input': 'hi'}))", "404"),
    ("print(post('/chat/completions', json={'model': 'nope', 'messages': []}))", "400"),
    ("print(post('/chat/completions', json={'model': 'nope',"
     " 'messages': [{'role': 'user', 'content': 'x'}]}))", "404"),
])
def test_run_fails_when_the_harness_swallows_any_error_answer(script: str, status: str) -> None:
    result = run_cli([*RUN, "--max-body-size", "200"], script)
    assert result.stdout.strip() == status
    assert result.returncode == 3, result.stderr
    assert "got no saved generation" in result.stderr


@pytest.mark.http
def test_run_fails_when_no_request_reached_the_server() -> None:
    result = run_cli(RUN, "print('answered from a cache')")
    assert result.returncode == 5, result.stderr
    assert "no request reached the replay server" in result.stderr


@pytest.mark.slow
@pytest.mark.http
def test_run_reports_distinct_requests_and_their_attempts() -> None:
    retry = ("for _ in range(4): post('/chat/completions', json={'model': "
             "'demo/tiny-chat-model', 'messages': [{'role': 'user', 'content': 'Name a hue'}]})")
    result = run_cli(RUN, retry)
    assert result.returncode == 3
    assert "1 distinct request(s) got no saved generation, in 4 attempt(s)" in result.stderr
    assert "(4 attempts)" in result.stderr
    assert 'requested "Name a hue"' in result.stderr  # the report quotes; the error does not


@pytest.mark.http
def test_run_takes_every_serve_option_but_workers() -> None:
    help_text = subprocess.run([*CLI, "run", "--help"], capture_output=True, text=True,
                               check=True).stdout
    assert "  --workers" not in help_text and "  --strict" in help_text
    result = subprocess.run([*CLI, "run", "examples/", "--workers", "2", "--", "true"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and "No such option '--workers'" in result.stderr


# --- 9. no 500s ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def app_url() -> Any:
    records = [chat_record("q", chat_response("a"), temperature=0.0),
               chat_record("refuse?", chat_response(None, refusal="I can't help."), line=2)]
    with running(create_app(Settings(strict=True), build(records))) as url:
        yield url


@pytest.mark.http
@pytest.mark.parametrize("depth", [300, 900, 1100])
def test_deeply_nested_requests_are_400(app_url: str, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    message = f'{{"role": "user", "content": "q", "x": {nested}}}'
    body = f'{{"model": "{MODEL}", "messages": [{message}]}}'
    r = httpx.post(app_url + "/chat/completions", content=body)
    assert_error(r, 400)


@pytest.mark.http
def test_equal_json_numbers_are_equal_in_strict_mode(app_url: str) -> None:
    r = httpx.post(app_url + "/chat/completions",
                   json={"model": MODEL, "messages": user("q"), "temperature": 0})
    assert r.status_code == 200, r.text


@pytest.mark.http
def test_a_miss_after_the_saved_files_moved_away_is_still_a_diagnosed_miss(
        tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [chat_record("2+2?", chat_response("4"))])
    with serving([path]) as url:
        shutil.rmtree(tmp_path)
        r = httpx.post(url + "/chat/completions",
                       json={"model": MODEL, "messages": user("2+3?")})
        error = assert_error(r, 400, "replay_no_match")
        assert "message 0 (user), character 2" in error["message"]


def test_a_saved_tool_calls_object_is_a_bad_line_not_a_500(tmp_path: Path) -> None:
    bad = chat_response(None, tool_calls={"id": "c", "function": {"name": "f"}})
    path = write_jsonl(tmp_path / "run.jsonl", [
        {"replay_record": 1, "endpoint": CHAT_PATH, "model": MODEL,
         "request": {"messages": user("q")}, "response": bad}])
    with pytest.raises(LoadError) as e:
        load([path], progress=False)
    assert e.value.line == 1 and e.value.field == "response.choices[0].message.tool_calls"


# --- 10. saved data that cannot be an instance id -------------------------------------

@pytest.mark.parametrize("field, value", [("instance", [1, 2]), ("file", {"a": 1}),
                                          ("run", ["x"])])
def test_a_non_scalar_source_field_is_a_bad_line(tmp_path: Path, field: str, value: Any
                                                 ) -> None:
    good = chat_record("ok", chat_response("a")).to_json()
    bad = {**chat_record("q", chat_response("b")).to_json(), "source": {field: value}}
    path = write_jsonl(tmp_path / "run.jsonl", [good, bad])
    with pytest.raises(LoadError) as e:
        load([path], progress=False)
    assert (e.value.line, e.value.field) == (2, f"source.{field}")
    skipped = load([path], progress=False, skip_bad_lines=True)
    assert skipped.index.models[MODEL].records == 1 and len(skipped.ctx.bad_lines) == 1


# --- 11, 12. loud where it should answer ------------------------------------------------

@pytest.mark.http
def test_a_saved_refusal_is_served_as_saved(app_url: str) -> None:
    with openai.OpenAI(base_url=app_url, api_key="x") as client:
        r = client.chat.completions.create(model=MODEL, messages=user("refuse?"))
    assert r.choices[0].message.content is None
    assert r.choices[0].message.refusal == "I can't help."


def test_a_batch_output_with_a_huge_first_line_is_recognised(tmp_path: Path) -> None:
    body = completion_response(" Paris")
    body["choices"][0]["logprobs"] = {"tokens": ["x"] * 200_000,
                                      "token_logprobs": [-0.5] * 200_000}
    write_jsonl(tmp_path / "batch_input.jsonl", [
        {"custom_id": "r1", "method": "POST", "url": COMPLETION_PATH,
         "body": {"model": MODEL, "prompt": "The capital of France is"}}])
    write_jsonl(tmp_path / "batch_output.jsonl", [
        {"id": "b1", "custom_id": "r1", "error": None,
         "response": {"status_code": 200, "body": body}}])
    assert (tmp_path / "batch_output.jsonl").stat().st_size > 1 << 20
    loaded = load([tmp_path], progress=False)
    assert not loaded.plan.ignored
    assert loaded.index.models[MODEL].records == 1
    assert loaded.index.models[MODEL].unusable_records == 0


# --- 13. saved files are never overwritten ----------------------------------------------

@pytest.mark.parametrize("command", ["index", "convert"])
def test_an_output_that_is_one_of_the_inputs_is_refused(tmp_path: Path, command: str) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [chat_record("q", chat_response("a"))])
    before = path.read_bytes()
    result = subprocess.run([*CLI, command, str(path), "-o", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "is one of the inputs" in result.stderr
    assert path.read_bytes() == before


# --- 14. the recorder passes any stream through, and saves what it can -----------------

CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": MODEL}


def sse(*chunks: dict[str, Any], end: bytes = b"\n\n") -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + end for c in chunks) + b"data: [DONE]" + end


def streaming_upstream(payload: bytes, gzipped: bool = False) -> Starlette:
    async def chat(request: Request) -> Response:
        await request.body()
        if gzipped:
            return Response(gzip.compress(payload), media_type="text/event-stream",
                            headers={"content-encoding": "gzip"})

        async def events() -> Any:
            for i in range(0, len(payload), 7):  # cut anywhere, even inside a line ending
                yield payload[i:i + 7]
        return StreamingResponse(events(), media_type="text/event-stream")
    return Starlette(routes=[Route(CHAT_PATH, chat, methods=["POST"])])


def deltas(*texts: str) -> list[dict[str, Any]]:
    out = [{**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": t},
                                  "finish_reason": None}]} for t in texts]
    out.append({**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return out


def record_stream(tmp_path: Path, upstream: Starlette) -> tuple[bytes, Recorder]:
    with running(upstream) as up:
        rec = Recorder(up, RecordWriter(tmp_path / "run.jsonl"))
        with running(create_record_app(rec)) as url:
            got = httpx.post(url + "/chat/completions", json={
                "model": MODEL, "messages": user("q"), "stream": True}).content
        rec.writer.close()
    return got, rec


def saved_text(tmp_path: Path) -> str:
    line = orjson.loads((tmp_path / "run.jsonl").read_bytes())
    return str(line["response"]["choices"][0]["message"]["content"])


@pytest.mark.slow
@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n", b"\r\r"])
def test_a_stream_with_any_sse_line_ending_is_saved(tmp_path: Path, end: bytes) -> None:
    payload = sse(*deltas("Hel", "lo"), end=end)
    got, rec = record_stream(tmp_path, streaming_upstream(payload))
    assert got == payload and rec.counts["recorded"] == 1
    assert saved_text(tmp_path) == "Hello"


def test_a_compressed_upstream_stream_reaches_the_client_decoded_and_is_saved(
        tmp_path: Path) -> None:
    payload = sse(*deltas("Hi"))
    got, rec = record_stream(tmp_path, streaming_upstream(payload, gzipped=True))
    assert got == payload and saved_text(tmp_path) == "Hi"


@pytest.mark.slow
@pytest.mark.parametrize("odd", [
    {**CHUNK, "choices": [{"index": None, "delta": {"content": "x"}}]},
    {**CHUNK, "choices": ["not a choice"]},
    {**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": None}]}}]},
])
def test_a_chunk_the_recorder_cannot_aggregate_passes_through_unsaved(
        tmp_path: Path, odd: dict[str, Any]) -> None:
    payload = sse(deltas("a")[0], odd, *deltas("b"))
    got, rec = record_stream(tmp_path, streaming_upstream(payload))
    assert got == payload
    assert rec.counts["recorded"] == 0 and rec.counts["aborted"] == 1
    assert (tmp_path / "run.jsonl").read_bytes() == b""


@pytest.mark.slow
@pytest.mark.http
@pytest.mark.parametrize("command, said", [
    (["record", "--upstream", "http://127.0.0.1:9", "--out", "run.jsonl"],
     "recorded 0 exchanges"),
    (["serve", str(ROOT / "examples")], "replay-server: stopped")])
@pytest.mark.parametrize("serving", [False, True])  # while uvicorn starts, or once it serves
def test_sigterm_drains_summarises_and_exits_0(tmp_path: Path, command: list[str], said: str,
                                               serving: bool) -> None:
    with spawn(*command, cwd=tmp_path) as server:
        if serving:
            wait_for(lambda: "Application startup complete" in server.output)
        assert server.stop(signal.SIGTERM, timeout=20) == 0, server.output
    assert said in server.output.split("ready on", 1)[1]


# --- 15. no silent security holes, no unbounded costs -----------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_empty_api_key_is_refused(how: str) -> None:
    args = ["--api-key", ""] if how == "flag" else []
    env = {"REPLAY_SERVER_API_KEY": ""} if how == "env" else {}
    result = subprocess.run([*CLI, "serve", "examples/", "--port", "0", *args],
                            capture_output=True, text=True, cwd=ROOT, timeout=30,
                            env={**os.environ, **env})
    assert result.returncode == 2
    assert "set but empty" in result.stderr


@pytest.mark.slow
@pytest.mark.http
def test_a_client_trickling_its_headers_is_cut_off() -> None:
    with spawn("serve", "examples/", "--read-timeout", "1") as server:
        host, port = server.base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            sock.settimeout(5)
            start = time.monotonic()
            assert sock.recv(100) == b""  # closed by the server
            assert time.monotonic() - start < 4
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 100\r\n\r\n{")
            sock.settimeout(5)
            start = time.monotonic()
            assert sock.recv(1000) == b""  # a body that never comes: cut off too
            assert time.monotonic() - start < 4


def _answer(sock: socket.socket) -> bytes:
    """One whole HTTP answer (a Content-Length body) read from a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(4096)
    return head


@pytest.mark.slow
@pytest.mark.http
def test_the_read_timeout_counts_from_each_request_on_a_kept_alive_connection() -> None:
    get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with spawn("serve", "examples/", "--read-timeout", "1") as server:
        host, port = server.base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.settimeout(5)
            sock.sendall(get)
            assert _answer(sock).startswith(b"HTTP/1.1 200")
            time.sleep(0.6)  # the next request begins 0.6 s after the connection...
            sock.sendall(get[:10])
            time.sleep(0.6)  # ...and ends 1.2 s after it, 0.6 s after it began: in time
            sock.sendall(get[10:])
            assert _answer(sock).startswith(b"HTTP/1.1 200")
            time.sleep(1.5)  # idle longer than the timeout: no request, nothing to cut
            sock.sendall(get)
            assert _answer(sock).startswith(b"HTTP/1.1 200")
            sock.sendall(get[:10])  # but a request that stops half-way is cut off
            start = time.monotonic()
            assert sock.recv(100) == b""
            assert time.monotonic() - start < 4


def test_a_line_over_the_cap_is_a_bad_line_named(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [chat_record("q", chat_response("a")),
                                                chat_record("q2", chat_response("b" * 5000))])
    with pytest.raises(LoadError) as e:
        load([path], progress=False, max_line=2000)
    assert e.value.line == 2 and "longer than 2000 bytes" in str(e.value)
    skipped = load([path], progress=False, max_line=2000, skip_bad_lines=True)
    assert skipped.index.models[MODEL].records == 1
    result = subprocess.run([*CLI, "inspect", str(path), "--max-line-size", "2000"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and f"{path}:2:" in result.stderr


# --- 16. diagnostics never stall serving and never read the files again -----------------

def test_the_nearest_prompt_catalog_is_built_with_the_index(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [chat_record(f"What is {i}?", chat_response("a"),
                                                            line=i) for i in range(50)])
    index = load([path], progress=False).index
    path.unlink()  # a miss must not need the files
    found = index.catalog(MODEL, CHAT.kind).nearest(keys.canonical(chat_request.prompt(
        {"messages": user("What is 7?!")})))
    assert found is not None and found[0]["messages"] == user("What is 7?")


# --- 17, 18. how misses reach harnesses -------------------------------------------------

def every_error_message() -> list[errors.ReplayServerError]:
    """Each error the server can send, with saved data and names full of trigger phrases."""
    nasty = "maximum context length blocked context window input length too many tokens"
    records = [chat_record(nasty, chat_response("a"), file=f"{nasty}.jsonl"),
               chat_record("amb", chat_response("x"), instance=nasty, line=2),
               chat_record("amb", chat_response("y"), instance=2, line=3),
               chat_record("bad", None, unusable=nasty, line=4),
               chat_record("n", chat_response("a", "b"), line=5)]
    r = Replayer(build(records, **{nasty: MODEL}), Rules())
    found: list[errors.ReplayServerError] = []
    bodies: list[dict[str, Any]] = [
        {"messages": user(nasty + "!")}, {"messages": user("amb")},
        {"messages": user("bad")}, {"messages": user("n"), "n": 3},
        {"messages": user("n")}, {"messages": user("n")}, {"messages": user("n")},
        {"model": "gpt " + nasty, "messages": user("q")}, {"messages": nasty},
        {"messages": user("n"), "temperature": nasty}]
    for body in bodies:
        try:
            r.handle(CHAT_PATH, orjson.dumps({"model": MODEL, **body}))
        except errors.ReplayServerError as e:
            found.append(e)
    strict = Replayer(build(records), Rules(strict=True))
    try:
        strict.handle(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": user(nasty),
                                               "temperature": 2, "stop": nasty}))
    except errors.ReplayServerError as e:
        found.append(e)
    codes = {e.code for e in found}
    assert set(errors.REPLAY_CODES) <= codes | {"replay_params_mismatch"} - {None}
    return found


def test_no_error_message_quotes_the_prompt() -> None:
    miss = every_error_message()[0]
    assert isinstance(miss, errors.NoMatch)
    assert "!" not in miss.body()["error"]["message"]
    assert "requested" in miss.detail["difference_quoted"]


@pytest.mark.harness  # inspect_ai's own error handling
def test_no_error_message_is_turned_into_an_answer_by_a_harness() -> None:
    from inspect_ai.model._openai import openai_handle_bad_request
    from inspect_ai.model._providers._litellm_proxy_errors import litellm_error_model_output

    # evalscope 1.14.1 (`evalscope/models/utils/openai.py`, openai_handle_bad_request):
    # these phrases in a 400/422 message become the answer (not installable here: torch)
    evalscope = ("context window", "maximum context length", "input length", "too many tokens")
    for error in every_error_message():
        status, headers, body = errors.render(error)
        # Any: openai 1 and 2 type it as an httpx.Response, openai 3 as an httpx2 one (and
        # takes both)
        response: Any = httpx.Response(status, content=body,
                                       request=httpx.Request("POST", "http://x"))
        message = orjson.loads(body)["error"]["message"]
        e = openai.BadRequestError(f"Error code: {status} - {message}", response=response,
                                   body=orjson.loads(body)["error"])
        assert isinstance(openai_handle_bad_request("m", e), Exception), message
        assert litellm_error_model_output("m", message) is None, message
        assert not any(p in message.lower() for p in evalscope), message
        assert (b"x-should-retry", b"false") in headers


def test_replay_errors_are_400_with_their_code() -> None:
    for error in every_error_message():
        if isinstance(error, errors.ReplayError):
            assert error.status == 400 and str(error.code).startswith("replay_")


# --- 20, 21. samples --------------------------------------------------------------------

def test_ambiguous_instances_with_different_saved_parameters_point_to_strict() -> None:
    records = [chat_record("q", chat_response(t), instance=i, line=i, temperature=temp)
               for i, (t, temp) in enumerate([("x", 0.0), ("y", 0.7)])]
    with pytest.raises(errors.Ambiguous, match=r"parameters differ \(temperature\).*--strict"):
        handle(Replayer(build(records), Rules()))
    strict = Replayer(build(records), Rules(strict=True))
    assert handle(strict, temperature=0.7)["choices"][0]["message"]["content"] == "y"


def test_seeded_samples_are_stateless_across_passes_and_instances() -> None:
    records = [chat_record("q", chat_response(f"s{seed}"), instance="doc", line=seed,
                           seed=seed) for seed in (11, 22, 33)]
    r = Replayer(build(records), Rules())
    for _ in range(2):  # a second rescoring pass against the same long-lived server
        for seed in (33, 11, 22):
            assert handle(r, seed=seed)["choices"][0]["message"]["content"] == f"s{seed}"
