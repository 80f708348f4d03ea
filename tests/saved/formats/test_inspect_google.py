"""inspect_ai's `google/` calls mapped to what the Gemini API received and sent
(saved/formats/inspect_google.py), and read as Gemini records: checked against the fake
Gemini server's wire log, for the logs in tests/data/inspect_ai/google*/ (made by
tests/data/gen/make_harness_data.py) and for runs of the installed inspect_ai.
(tests/harnesses/test_gemini.py rescores a log inspect_ai wrote itself under `run`.)"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from replay_server.paths import GEMINI_PATH
from replay_server.saved.formats import LoadContext
from replay_server.saved.formats.eval_zip import eval_samples
from replay_server.saved.formats.inspect_ai import MEDIA_REMOVED
from replay_server.saved.formats.inspect_google import (
    OLD_SDK,
    RETRIED,
    is_gemini,
    model_of,
    old_sdk,
    retried,
    wire_request,
    wire_response,
)
from replay_server.saved.loader import plan, read
from replay_server.saved.record import Record
from tests.fakemodel.server import create_app as fake_model
from tests.harnesses.commands import BIN, offline_env
from tests.support import ROOT, running, serving

DATA = ROOT / "tests" / "data" / "inspect_ai"
# Field names google-genai 3.6 sends in snake_case (objects its converters pass on as they
# are); the mapping spells them as the API documents them, and the API reads both alike.
SDK_SPELLING = {"include_thoughts": "includeThoughts",
                "parameters_json_schema": "parametersJsonSchema"}


def documented(value: Any) -> Any:
    """A wire body with the SDK's snake_case names spelled as the API documents them."""
    if isinstance(value, list):
        return [documented(v) for v in value]
    if isinstance(value, dict):
        return {SDK_SPELLING.get(k, k): documented(v) for k, v in value.items()}
    return value


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def logged_calls(samples: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Each model event of the samples (as dicts), its `contents` put back from the pool."""
    for sample in samples:
        pool = (sample.get("events_data") or {}).get("calls") or []
        for event in sample["events"]:
            if event["event"] == "model":
                call = event["call"]
                refs = call.get("call_refs")
                if refs is not None:
                    call["request"] = {**call["request"], call["call_key"]: [
                        m for start, end in refs for m in pool[start:end]]}
                yield event


def assert_maps_to_the_wire(events: list[dict[str, Any]], wire: list[dict[str, Any]]) -> None:
    """Every event's request is the body of one wire exchange, and its response that
    exchange's response, exactly; no exchange is left over."""
    sent: dict[str, list[dict[str, Any]]] = {}
    for exchange in wire:
        sent.setdefault(canonical(documented(exchange["request"])), []).append(exchange)
    for event in events:
        request = event["call"]["request"]
        assert is_gemini(request)
        exchange = sent[canonical(wire_request(request))].pop(0)
        assert model_of(event["model"]) == exchange["path"].split("/")[3].split(":")[0]
        response = wire_response(event["call"]["response"])
        assert response == exchange["response"]
        assert not (old_sdk(event["call"]["response"]) or retried(event["output"], response))
    assert not [e for left in sent.values() for e in left]


def wire_of(case: str) -> list[dict[str, Any]]:
    lines = (DATA / case / "wire.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("case", ["google", "google_stream"])
def test_each_call_of_a_saved_log_is_what_the_sdk_sent_and_got(case: str) -> None:
    """Thinking on, the calculator tool (its call's signature sent back next turn), a
    dialogue; streamed or not."""
    log = next((DATA / case).glob("*.eval"))
    events = list(logged_calls(eval_samples(log, LoadContext())))
    assert len(events) == 7
    assert_maps_to_the_wire(events, wire_of(case))


def first_call(case: str = "google") -> dict[str, Any]:
    log = next((DATA / case).glob("*.eval"))
    return next(logged_calls(eval_samples(log, LoadContext())))


def test_before_0_3_139_the_config_was_logged_whole() -> None:
    """inspect 0.3.69-0.3.138 logged the whole GenerateContentConfig (system instruction,
    tools, safety settings in it; no top-level system_instruction): the same body."""
    logged = first_call()["call"]["request"]
    older = {"contents": logged["contents"], "generation_config": {
        **logged["generation_config"], "systemInstruction": logged["system_instruction"],
        "safetySettings": logged["safety_settings"], "tools": logged["tools"],
        "toolConfig": logged["tool_config"]},
        "safety_settings": logged["safety_settings"], "tools": logged["tools"],
        "tool_config": logged["tool_config"]}
    assert wire_request(older) == wire_request(logged)
    assert wire_request(logged)["systemInstruction"] == {"parts": [{"text": (
        "You are a careful calculator. Answer with 'The answer is N.'")}], "role": "user"}


@pytest.mark.parametrize(("logged", "sent"), [
    ("Be brief.", {"parts": [{"text": "Be brief."}], "role": "user"}),
    (["Be brief.", {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}],
     {"parts": [{"text": "Be brief."}, {"inlineData": {"mimeType": "image/png",
                                                        "data": "iVBO"}}], "role": "user"}),
    ({"parts": [{"text": "Be brief."}]}, {"parts": [{"text": "Be brief."}]}),
])
def test_a_system_instruction_is_one_content_as_the_sdk_makes_it(logged: Any,
                                                                  sent: Any) -> None:
    contents = [{"role": "user", "parts": [{"text": "What is 1 + 1?"}]}]
    body = wire_request({"contents": contents, "generation_config": {},
                         "system_instruction": logged})
    assert body == {"contents": contents, "systemInstruction": sent, "generationConfig": {}}


def test_the_sdks_own_config_fields_are_not_sent() -> None:
    contents = [{"role": "user", "parts": [{"text": "What is 1 + 1?"}]}]
    body = wire_request({"contents": contents, "generation_config": {
        "httpOptions": {"headers": {"x-irid": "abc"}}, "automaticFunctionCalling": {
            "disable": True}, "temperature": 0.5, "maxOutputTokens": 9, "labels": {"a": "b"},
        "cachedContent": "cachedContents/1"}, "tools": None})
    assert body == {"contents": contents, "labels": {"a": "b"},
                    "cachedContent": "cachedContents/1",
                    "generationConfig": {"temperature": 0.5, "maxOutputTokens": 9}}


def test_a_response_is_the_apis_bytes_in_its_base64() -> None:
    """The SDK dumps bytes URL-safe: the signature and inline data go back to the standard
    alphabet the API sends; no text changes."""
    dumped = {"sdkHttpResponse": {"headers": {"Server": "x"}}, "candidates": [{"content": {
        "role": "model", "parts": [
            {"text": "a-b_c", "thought": True},
            {"text": "x", "thoughtSignature": "ab-_cd=="},
            {"inlineData": {"mimeType": "image/png", "data": "-_-_"}},
            {"functionCall": {"name": "f", "args": {"data": "-_"}}}]},
        "finishReason": "STOP"}], "automaticFunctionCallingHistory": [],
        "modelVersion": "gemini-2.5-flash", "responseId": "r-_1"}
    assert wire_response(dumped) == {"candidates": [{"content": {"role": "model", "parts": [
        {"text": "a-b_c", "thought": True},
        {"text": "x", "thoughtSignature": "ab+/cd=="},
        {"inlineData": {"mimeType": "image/png", "data": "+/+/"}},
        {"functionCall": {"name": "f", "args": {"data": "-_"}}}]}, "finishReason": "STOP"}],
        "modelVersion": "gemini-2.5-flash", "responseId": "r-_1"}


def test_a_retried_malformed_function_call_is_told_by_its_usage() -> None:
    """inspect sums every attempt's usage into the event's output; the response is the
    last attempt's."""
    event = first_call()
    response = wire_response(event["call"]["response"])
    total = response["usageMetadata"]["totalTokenCount"]
    assert not retried(event["output"], response)
    event["output"]["usage"]["total_tokens"] = total * 2
    assert retried(event["output"], response)


def test_what_is_not_a_google_call() -> None:
    assert not is_gemini({"messages": [], "model": "gpt"})
    assert not is_gemini({"contents": "text", "generation_config": {}})
    assert old_sdk({"candidates": [], "usage_metadata": {"prompt_token_count": 3}})
    assert not old_sdk(wire_response(first_call()["call"]["response"]))
    assert [model_of(m) for m in ("google/gemini-2.5-flash", "google/vertex/gemini-2.5-pro")
            ] == ["gemini-2.5-flash", "gemini-2.5-pro"]


def records_of(path: Path) -> tuple[list[Record], LoadContext]:
    ctx = LoadContext()
    return list(read(plan([path]), ctx)), ctx


@pytest.mark.parametrize("case", ["google", "google_stream"])
def test_the_reader_makes_a_gemini_record_of_each_call(case: str) -> None:
    """Each google/ call: a Gemini record of the body the SDK sent and the response the API
    sent (the fake's wire log; a stream's, aggregated), for the model of the path, its
    sample the instance."""
    found, ctx = records_of(DATA / case)
    wire = wire_of(case)
    assert not ctx.skipped and len(found) == len(wire) == 7
    assert {(r.endpoint, r.model, r.unusable) for r in found} == {
        (GEMINI_PATH, "gemini-2.5-flash", None)}
    assert sorted(canonical([r.request, r.response]) for r in found) == sorted(
        canonical([documented(w["request"]), w["response"]]) for w in wire)
    assert {r.source["instance"] for r in found} == {"q1", "q2", "q3", "q4", "multi", "tool"}


@pytest.mark.http
def test_a_google_log_answers_each_body_the_sdk_sent_as_the_api_did() -> None:
    """Served: each wire body (as the SDK spelled it) gets the API's response, under any
    version of the path."""
    wire = wire_of("google")
    with serving([DATA / "google"]) as url:
        root = url.removesuffix("/v1")
        for exchange, version in zip(wire, ["v1", "v1beta"] * 4, strict=False):
            path = exchange["path"].replace("/v1/", f"/{version}/")
            got = httpx.post(root + path, json=exchange["request"], timeout=30)
            assert got.status_code == 200, got.text
            assert got.json() == exchange["response"]


def as_json_log(tmp_path: Path, change: Any) -> Path:
    """The google log as a `.json` log, with `change(model events)` applied."""
    log = next((DATA / "google").glob("*.eval"))
    samples = list(eval_samples(log, LoadContext()))
    change([e for s in samples for e in s["events"] if e["event"] == "model"])
    path = tmp_path / "google.json"
    path.write_text(json.dumps({"eval_id": "e", "run_id": "r", "samples": samples}))
    return path


def test_a_failed_or_retried_google_call_is_unusable(tmp_path: Path) -> None:
    """A failed call (inspect logs the API's error), and a call inspect asked again after
    a malformed function call (its usage the sum of the attempts'): saved as unusable."""
    def change(events: list[dict[str, Any]]) -> None:
        events[0].update(error="RESOURCE_EXHAUSTED: quota")
        events[0]["call"]["response"] = {"error": {"message": "quota", "code": 429}}
        events[1]["output"]["usage"]["total_tokens"] *= 2

    found, _ = records_of(as_json_log(tmp_path, change))
    assert [(r.response, r.unusable) for r in found[:2]] == [
        (None, "the saved model call failed: RESOURCE_EXHAUSTED: quota"),
        (None, RETRIED)]
    assert all(r.unusable is None for r in found[2:])


def test_a_google_call_of_the_old_sdk_or_without_media_is_left_out(tmp_path: Path) -> None:
    """inspect before 0.3.69 (google.generativeai: a proto dump), and a request whose
    media inspect did not log, are counted as left out, with why."""
    def change(events: list[dict[str, Any]]) -> None:
        events[0]["call"]["response"] = {"candidates": [], "usage_metadata": {}}
        events[1]["call"]["request"]["contents"] = [{"role": "user", "parts": [
            {"inlineData": {"mimeType": "image/png", "data": MEDIA_REMOVED}}]}]
        events[1]["call"].pop("call_refs", None)

    found, ctx = records_of(as_json_log(tmp_path, change))
    assert len(found) == 5
    assert ctx.skipped == {OLD_SDK: 1, "request had image or audio data that inspect "
                                       "does not log": 1}


# --------------------------------------------------------------------------- inspect, live


@pytest.mark.harness
@pytest.mark.http
@pytest.mark.slow
@pytest.mark.parametrize("streaming", ["false", "true"])
def test_each_call_of_a_run_now_is_what_the_sdk_sent_and_got(tmp_path: Path,
                                                               streaming: str) -> None:
    """The installed inspect_ai (google/gemini-2.5-flash: thinking on; the calculator; a
    dialogue), against the fake Gemini server: its log, read by inspect itself, maps to
    the wire."""
    from inspect_ai.log import read_eval_log

    shutil.copytree(ROOT / "tests" / "data" / "gen" / "tasks", tmp_path / "tasks")
    wire = tmp_path / "wire.jsonl"
    env = {k: v for k, v in offline_env(tmp_path).items()
           if not k.startswith(("GOOGLE_", "GEMINI_", "VERTEX"))}
    with running(fake_model(None, str(wire))) as url:
        ran = subprocess.run(
            [str(BIN / "inspect"), "eval", "inspect_arith.py", "--model",
             "google/gemini-2.5-flash", "-M", f"streaming={streaming}", "--temperature", "0",
             "--display", "plain", "--log-dir", str(tmp_path / "logs")],
            env={**env, "GOOGLE_BASE_URL": url.removesuffix("/v1"),
                 "GOOGLE_API_KEY": "any-key"},
            cwd=tmp_path / "tasks", capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    (log,) = (read_eval_log(str(p)) for p in (tmp_path / "logs").glob("*.eval"))
    events = [e.model_dump(mode="json", exclude_none=True) for s in log.samples or []
              for e in s.events if e.event == "model"]
    exchanges = [json.loads(line) for line in wire.read_text().splitlines()]
    assert len(events) == len(exchanges) == 7
    assert all(("chunks" in w) == (streaming == "true") for w in exchanges)
    assert_maps_to_the_wire(events, exchanges)
