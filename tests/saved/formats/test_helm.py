"""HELM run folders (tests/data/helm, written by crfm-helm 0.5.16 against the fake model)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from replay_server.errors import LoadError
from replay_server.index.loading import load
from replay_server.saved.formats import LoadContext
from replay_server.saved.formats.helm import CACHED, EMBEDDING, MULTIMODAL, TRANSCRIPTION
from replay_server.saved.loader import plan, read
from replay_server.saved.record import Record, strip_transport
from replay_server.settings import Settings
from tests.support import assert_error, serving

DATA = Path(__file__).parents[2] / "data" / "helm"
RUNS = sorted(DATA.glob("runs/replay/*"))
PROMPT = "Question: What is 12 + 7?\nAnswer:"


def wire() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / "wire.jsonl").read_text().splitlines()]


def records(path: Path) -> list[Record]:
    return list(read(plan([path]), LoadContext()))


def canonical(body: dict[str, Any]) -> bytes:
    return orjson.dumps(strip_transport(body), option=orjson.OPT_SORT_KEYS)


def helm_sees(response: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What HELM's clients take from a response: chat, each choice's content (and the
    reasoning_content it keeps as thinking); completions, each text with its tokens and
    their logprobs (a null one read as 0)."""
    if response["object"] == "chat.completion":
        return [(c["message"]["content"], c["message"].get("reasoning_content"))
                for c in response["choices"]]
    return [(c["text"], c["logprobs"]["tokens"],
             [lp or 0 for lp in c["logprobs"]["token_logprobs"]]) for c in response["choices"]]


def state(request: dict[str, Any], texts: list[str] | None = None,
          tokens: list[list[dict[str, Any]]] | None = None, **result: Any) -> dict[str, Any]:
    """A request state as HELM writes it: the request's fields as saved (HELM's defaults
    filled in), and a successful result with one completion per text."""
    texts = ["The answer is 19."] if texts is None else texts
    completions = [{"text": t, "logprob": 0.0, "tokens": (tokens or [[]] * len(texts))[i]}
                   for i, t in enumerate(texts)]
    return {"instance": {"input": {"text": "What is 12 + 7?"}, "references": [],
                         "split": "test", "id": "g1"},
            "train_trial_index": 0,
            "request": {"model_deployment": "fake/tiny-model-chat", "model": "fake/tiny-model",
                        "embedding": False, "prompt": PROMPT, "temperature": 0.0,
                        "num_completions": len(texts), "top_k_per_token": 1,
                        "max_tokens": 16, "stop_sequences": ["\n"], "echo_prompt": False,
                        "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0, **request},
            "result": {"success": True, "embedding": [], "completions": completions,
                       "cached": False, **result},
            "num_train_instances": 0, "prompt_truncated": False}


def run_folder(tmp_path: Path, states: list[Any], name: str = "run") -> Path:
    """runs/suite/NAME/ holding a scenario_state.json of `states` and a run_spec.json."""
    folder = tmp_path / "runs" / "suite" / name
    folder.mkdir(parents=True)
    (folder / "run_spec.json").write_text(json.dumps({"name": name}))
    (folder / "scenario_state.json").write_text(
        json.dumps({"adapter_spec": {}, "request_states": states}, indent=2))
    return folder


def test_load_counts() -> None:
    loaded = load([DATA], progress=False)
    run = loaded.index.models["tiny-model"]
    # 5 runs of 6 states; greedy and sampled runs share their 12 prompts
    assert (run.records, len(run.entries), run.samples, run.unusable_records) == \
        (30, 18, 6 + 18 + 6 + 12 + 6, 0)
    assert not loaded.ctx.skipped and not loaded.ctx.bad_lines
    assert Counter(p.name for p in loaded.plan.ignored) == {
        "wire.jsonl": 1, "per_instance_stats.json": 5, "stats.json": 5}


def test_each_record_holds_the_exact_body_helm_sent() -> None:
    saved = {canonical(r.request): r for run in RUNS for r in records(run)}
    assert len(saved) == 30
    for call in wire():
        record = saved.pop(canonical(call["request"]))
        assert record.endpoint == call["path"] and record.model == "tiny-model"
        assert record.response is not None
        assert helm_sees(record.response) == helm_sees(call["response"])
        # HELM keeps finish_reason only where it does not cut: with echo (language modeling)
        echo = call["request"].get("echo")
        assert [c["finish_reason"] for c in record.response["choices"]] == \
            [c["finish_reason"] if echo else None for c in call["response"]["choices"]]
        assert record.response["usage"] is None
        assert record.source["harness"] == "helm"
    assert not saved


def test_which_client_a_run_used_is_read_from_the_saved_tokens() -> None:
    for run in RUNS:
        endpoint = "/v1/completions" if "completions" in run.name else "/v1/chat/completions"
        assert {r.endpoint for r in records(run)} == {endpoint}, run.name


@pytest.mark.http
def test_every_request_helm_sent_gets_its_saved_generation_strictly() -> None:
    """--strict tells the greedy runs from the sampled ones, which share their prompts."""
    with serving([DATA], Settings(strict=True)) as url, \
            httpx.Client(base_url=url.removesuffix("/v1")) as http:
        for call in wire() * 2:  # stateless: a second pass gets the same
            got = http.post(call["path"], json=call["request"])
            assert got.status_code == 200, got.text
            assert helm_sees(got.json()) == helm_sees(call["response"])
        request = wire()[0]["request"]
        assert_error(http.post("/v1/chat/completions", json={**request, "max_tokens": 8}),
                     400, "replay_params_mismatch")
        assert_error(http.post("/v1/chat/completions", json={**request, "n": 2}), 400)


def test_chat_request_fields(tmp_path: Path) -> None:
    [record] = records(run_folder(tmp_path, [state({
        "temperature": 0.7, "top_p": 0.9, "max_tokens": 5, "stop_sequences": [],
        "presence_penalty": 0.5, "frequency_penalty": 0.25}, ["a", "b"])]))
    assert record.request == {
        "model": "tiny-model", "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0.7, "top_p": 0.9, "n": 2, "stop": None, "max_tokens": 5,
        "presence_penalty": 0.5, "frequency_penalty": 0.25}
    assert record.response is not None and helm_sees(record.response) == [("a", None),
                                                                            ("b", None)]


def test_chat_messages_echo_thinking_and_finish_reason(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    chat = state({"messages": messages, "prompt": ""}, ["Hello"])
    chat["result"]["completions"][0].update(thinking={"text": "greet"},
                                            finish_reason={"reason": "stop"})
    echo = state({"echo_prompt": True}, [PROMPT + " The answer is 19."])
    got = records(run_folder(tmp_path, [chat, echo]))
    assert got[0].request["messages"] == messages
    assert got[0].response is not None and got[1].response is not None
    assert helm_sees(got[0].response) == [("Hello", "greet")]
    assert got[0].response["choices"][0]["finish_reason"] == "stop"
    assert helm_sees(got[1].response) == [(" The answer is 19.", None)]


def test_reasoning_audio_and_schema_requests_as_helm_changes_them(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"b": {}, "a": {}}}
    got = records(run_folder(tmp_path, [
        state({"model": "openai/o3-mini", "stop_sequences": []}),
        state({"model": "openai/gpt-4o-audio-preview-2024-10-01", "stop_sequences": []}),
        state({"response_format": {"json_schema": schema}})]))
    assert got[0].request == {"model": "o3-mini", "messages": [{"role": "user",
                                                                 "content": PROMPT}],
                              "n": 1, "max_completion_tokens": 16}
    assert got[1].request["modalities"] == ["text"] and "stop" not in got[1].request
    sent = got[2].request["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["strict"] is True
    assert list(sent["json_schema"]["schema"].items()) == [
        *schema.items(), ("additionalProperties", False), ("required", ["b", "a"])]


def test_completions_request_fields_and_logprobs(tmp_path: Path) -> None:
    tokens = [[{"text": " The", "logprob": -1.5}, {"text": " answer", "logprob": 0}]]
    [record] = records(run_folder(tmp_path, [state(
        {"top_k_per_token": 5, "echo_prompt": True, "max_tokens": 0, "stop_sequences": []},
        [" The answer"], tokens)]))
    assert record.endpoint == "/v1/completions"
    assert record.request == {
        "model": "tiny-model", "prompt": PROMPT, "temperature": 0.0, "n": 1, "max_tokens": 0,
        "best_of": 5, "logprobs": 5, "stop": None, "top_p": 1, "presence_penalty": 0,
        "frequency_penalty": 0, "echo": True}
    assert record.response is not None
    assert record.response["choices"][0]["logprobs"] == {
        "tokens": [" The", " answer"], "token_logprobs": [-1.5, 0], "top_logprobs": None,
        "text_offset": None}


def test_states_not_mapped_are_counted_and_named(tmp_path: Path) -> None:
    run = run_folder(tmp_path, [
        state({"embedding": True}), state({}),
        state({"multimodal_prompt": {"media_objects": []}, "prompt": ""}),
        state({"model": "openai/whisper-1"})])
    loaded = load([run], progress=False)
    assert loaded.index.models["tiny-model"].records == 1
    file = run / "scenario_state.json"
    assert loaded.ctx.skipped == {EMBEDDING: 1, MULTIMODAL: 1, TRANSCRIPTION: 1}
    assert loaded.ctx.skipped_examples[MULTIMODAL] == [f"{file} (request_states[2])"]


def test_failed_unrun_and_short_states_are_unusable(tmp_path: Path) -> None:
    failed = state({}, success=False, error="OpenAI error: rate limited", completions=[])
    unrun = state({})
    unrun["result"] = None
    short = state({"num_completions": 3}, ["one"])
    got = records(run_folder(tmp_path, [failed, unrun, short]))
    assert [r.unusable for r in got] == [
        "HELM saved a failed request: OpenAI error: rate limited",
        "HELM did not run this request (no result: a dry run?)",
        "HELM saved 1 completions for n = 3"]


@pytest.mark.http
def test_a_repeat_helm_answered_from_its_cache_is_read_once_and_a_conflict_is_ambiguous(
        tmp_path: Path) -> None:
    first, repeat = state({}, ["The answer is 19."]), state({}, ["The answer is 19."])
    other = state({"prompt": "Question: What is 1 + 1?\nAnswer:"}, ["The answer is 2."])
    conflict = state({"prompt": "Question: What is 1 + 1?\nAnswer:"}, ["The answer is 3."])
    conflict["instance"]["id"] = "g2"  # another instance with the same prompt
    run = run_folder(tmp_path, [first, repeat, other, conflict])
    loaded = load([run], progress=False)
    assert loaded.index.models["tiny-model"].records == 3
    assert loaded.ctx.skipped == {CACHED: 1}
    request = {"model": "tiny-model", "messages": [{"role": "user", "content": PROMPT}],
               "temperature": 0.0, "max_tokens": 16, "stop": ["\n"]}
    with serving([run]) as url, httpx.Client(base_url=url) as http:
        for _ in range(2):
            got = http.post("/chat/completions", json=request)
            assert helm_sees(got.json()) == [("The answer is 19.", None)]
        other_prompt = other["request"]["prompt"]
        assert_error(http.post("/chat/completions", json={
            **request, "messages": [{"role": "user", "content": other_prompt}]}), 400,
            "replay_ambiguous")


def test_a_bad_file_is_named_with_its_line_or_state_and_field(tmp_path: Path) -> None:
    run = run_folder(tmp_path, [state({}), state({"max_tokens": "16"})])
    file = run / "scenario_state.json"
    with pytest.raises(LoadError) as e:
        records(run)
    assert str(e.value) == (f"{file} (request_states[1]): field `request.max_tokens`: "
                            "expected int, got str")
    file.write_text(json.dumps({"request_states": [state({})]}, indent=2)[:-8])
    with pytest.raises(LoadError, match=rf"^{file}:\d+: not valid JSON"):
        records(run)
    file.write_text('{"adapter_spec": {}}')
    with pytest.raises(LoadError) as e:
        records(run)
    assert str(e.value) == f"{file}: field `request_states`: expected a list: not a HELM " \
        "scenario state"
    bad_text = state({})
    bad_text["result"]["completions"][0]["text"] = None
    for field, value in (("model", "tiny-model"), ("stop_sequences", [1])):
        file.write_text(json.dumps({"request_states": [state({field: value})]}))
        with pytest.raises(LoadError, match=f"field `request.{field}`"):
            records(run)
    file.write_text(json.dumps({"request_states": [bad_text]}))
    with pytest.raises(LoadError, match=r"\(request_states\[0\]\): field "
                       r"`result.completions\[0\].text`: expected a string"):
        records(run)


def test_a_scenario_state_is_claimed_only_beside_its_run_spec(tmp_path: Path) -> None:
    run = run_folder(tmp_path, [state({})])
    (run / "run_spec.json").unlink()
    with pytest.raises(LoadError, match="HELM run folders"):
        load([run / "scenario_state.json"], progress=False)
    shutil.copy(RUNS[0] / "run_spec.json", run / "run_spec.json")
    assert len(records(run)) == 1


@pytest.mark.parametrize("response_format", [
    {"json_schema": {"type": "object", "properties": 5}},  # HELM lists its keys: none
    {"json_schema": [["type", "object"]]},  # not an object: no body HELM sends
    "json",  # not HELM's ResponseFormat
])
def test_a_bad_response_format_is_named_with_its_state_and_field(
        tmp_path: Path, response_format: Any) -> None:
    """Named, never a traceback nor a body without the schema HELM sent."""
    run = run_folder(tmp_path, [state({"response_format": response_format})])
    with pytest.raises(LoadError) as e:
        records(run)
    assert str(e.value).startswith(f"{run / 'scenario_state.json'} (request_states[0]): "
                                   "field `request.response_format")
