"""inspect_ai logs (`.eval` and `.json`), as the real harness wrote them (tests/data/inspect_ai)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from replay_server.errors import LoadError
from replay_server.index.loading import load
from replay_server.saved.formats import LoadContext
from replay_server.saved.formats.inspect_ai import NOT_LOGGED
from replay_server.saved.loader import plan, read
from replay_server.saved.record import Record, strip_transport
from replay_server.settings import Settings
from tests.support import assert_error, serving

DATA = Path(__file__).parents[2] / "data" / "inspect_ai"
ROOT = Path(__file__).parents[3]
CASES = ["arith", "arith_json", "arith_stream"]


def wire(case: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / case / "wire.jsonl").read_text().splitlines()]


def records(path: Path) -> list[Record]:
    return list(read(plan([path]), LoadContext()))


def log(case: str) -> Path:
    return next(p for p in (DATA / case).iterdir() if p.suffix in (".eval", ".json"))


def message(choice: dict[str, Any]) -> dict[str, Any]:
    """What a client takes from a chat choice."""
    msg = choice["message"]
    calls = [{"id": c["id"], "function": c["function"]} for c in msg.get("tool_calls") or []]
    return {"content": msg.get("content") or None, "reasoning": msg.get("reasoning"),
            "tool_calls": calls, "finish_reason": choice["finish_reason"]}


def test_load_counts() -> None:
    for case, files in (("arith", 2), ("arith_json", 1), ("arith_stream", 1)):
        loaded = load([DATA / case], progress=False)
        run = loaded.index.models["tiny-model"]
        assert (run.records, len(run.entries), run.samples) == (7 * files, 7, 7 * files)
        assert run.unusable_records == 0 and not loaded.ctx.skipped
        assert {p.name for p in loaded.plan.ignored} == {"wire.jsonl", "printed_scores.txt"}


LOGS = [*(DATA / "arith").glob("*.eval"), *(DATA / "arith").glob("*.json"), log("arith_json"),
        log("arith_stream")]


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.name}{p.suffix}")
def test_each_record_is_keyed_on_the_exact_body_that_was_sent(path: Path) -> None:
    saved = {orjson.dumps(r.request, option=orjson.OPT_SORT_KEYS): r for r in records(path)}
    for call in wire(path.parent.name):
        record = saved.pop(orjson.dumps(strip_transport(call["request"]),
                                        option=orjson.OPT_SORT_KEYS))
        assert record.model == "tiny-model" and record.source["harness"] == "inspect_ai"
        assert record.response is not None
        assert message(record.response["choices"][0]) == message(call["response"]["choices"][0])
        assert record.response["usage"]["completion_tokens"] == \
            call["response"]["usage"]["completion_tokens"]
    assert not saved


@pytest.mark.http
@pytest.mark.parametrize("case", ["arith", "arith_json"])
def test_the_requests_inspect_sends_get_its_generations(case: str) -> None:
    with serving([DATA / case], Settings(strict=True)) as url, httpx.Client(base_url=url) as http:
        for call in wire(case):
            got = http.post("/chat/completions", json=call["request"])
            assert got.status_code == 200, got.text
            body = got.json()
            assert message(body["choices"][0]) == message(call["response"]["choices"][0])
            assert (body["id"], body["usage"]["prompt_tokens"]) == \
                (call["response"]["id"], call["response"]["usage"]["prompt_tokens"])


@pytest.mark.http
def test_streamed_runs_replay_streamed() -> None:
    with serving([DATA / "arith_stream"], Settings(strict=True)) as url, openai.OpenAI(
            base_url=url, api_key="x", max_retries=0) as client:
        for call in wire("arith_stream"):
            content, reasoning, names = "", "", []
            for chunk in client.chat.completions.create(**call["request"]):
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    reasoning += getattr(choice.delta, "reasoning", None) or ""
                    names += [t.function.name for t in choice.delta.tool_calls or []
                              if t.function and t.function.name]
            want = message(call["response"]["choices"][0])
            assert (content or None, reasoning or None) == (want["content"], want["reasoning"])
            assert names == [c["function"]["name"] for c in want["tool_calls"]]


def edited(tmp_path: Path, case: str, change: Any) -> Path:
    """A copy of a case's `.json` log with `change(samples by id)` applied."""
    source = DATA / case / log(case).name if case != "arith" else next(
        (DATA / "arith").glob("*.json"))
    data = json.loads(source.read_text())
    change({s["id"]: s for s in data["samples"]}, data)
    path = tmp_path / source.name
    path.write_text(json.dumps(data))
    return path


def model_events(sample: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in sample["events"] if e["event"] == "model"]


def test_calls_that_were_not_logged_are_skipped_with_reasons(tmp_path: Path) -> None:
    def change(samples: dict[str, Any], _: Any) -> None:
        model_events(samples["q1"])[0].pop("call")
        cached = model_events(samples["q2"])[0]
        cached.update(call=None, cache="read")
        model_events(samples["q3"])[0]["call"]["call_key"] = "input"  # Responses API shape
        del model_events(samples["q4"])[0]["call"]["response"]["choices"]

    loaded = load([edited(tmp_path, "arith_json", change)], progress=False)
    assert loaded.ctx.skipped == {
        NOT_LOGGED: 1, "answered from inspect's cache (no request was sent)": 1,
        # a request with `input` and no `messages` is read as a Responses API call
        "not an OpenAI Responses API call (the response has no output)": 1,
        "not an OpenAI chat-completions call (the response has no choices)": 1}
    assert "(sample 'q1', epoch 1, model call 0)" in loaded.ctx.skipped_examples[NOT_LOGGED][0]
    assert loaded.index.models["tiny-model"].records == 3


@pytest.mark.http
def test_without_call_response_the_answer_is_rebuilt_from_the_output(tmp_path: Path) -> None:
    def change(samples: dict[str, Any], _: Any) -> None:
        for sample in samples.values():
            for event in model_events(sample):
                event["call"]["response"] = None

    path = edited(tmp_path, "arith", change)
    with serving([path], Settings(strict=True)) as url, httpx.Client(base_url=url) as http:
        for call in wire("arith"):
            body = http.post("/chat/completions", json=call["request"]).json()
            want = call["response"]
            assert message(body["choices"][0]) == message(want["choices"][0])
            assert body["id"] == want["id"] and body["created"] is None
            assert body["usage"]["prompt_tokens"] == want["usage"]["prompt_tokens"]
            arguments = [c["function"]["arguments"]
                         for c in body["choices"][0]["message"].get("tool_calls") or []]
            assert arguments == [c["function"]["arguments"]
                                 for c in want["choices"][0]["message"].get("tool_calls") or []]


@pytest.mark.http
def test_a_failed_call_is_unusable(tmp_path: Path) -> None:
    def change(samples: dict[str, Any], _: Any) -> None:
        event = model_events(samples["q1"])[0]
        event["error"] = "Error code: 400 - context length exceeded\nTraceback ..."
        event["call"].update(error=True, response={"error": {"message": "too long"}})

    path = edited(tmp_path, "arith_json", change)
    assert load([path], progress=False).index.models["tiny-model"].unusable_records == 1
    with serving([path]) as url, httpx.Client(base_url=url) as http:
        error = assert_error(http.post("/chat/completions", json=wire("arith_json")[0]["request"]),
                             400, "replay_unusable")
        # quoted, but defused: no harness pattern-matches it into an answer
        assert "the saved model call failed: Error code: 400 - context length exceeded" \
            in error["message"].replace("\u2060", "")
        assert "context length exceeded" not in error["message"]


def test_attachments_are_resolved(tmp_path: Path) -> None:
    def change(samples: dict[str, Any], _: Any) -> None:
        sample = samples["q1"]
        pooled = sample["events_data"]["calls"]
        sample["attachments"] = {"a" * 32: pooled[0]["content"]}
        pooled[0]["content"] = "attachment://" + "a" * 32

    path = edited(tmp_path, "arith_json", change)
    saved = [r.request for r in records(path)]
    assert strip_transport(wire("arith_json")[0]["request"]) in saved


@pytest.mark.http
def test_epochs_are_the_samples_of_one_instance_in_epoch_order(tmp_path: Path) -> None:
    def change(samples: dict[str, Any], data: dict[str, Any]) -> None:
        second = json.loads(json.dumps(samples["q1"]))
        second["epoch"] = 2
        model_events(second)[0]["call"]["response"]["choices"][0]["message"]["content"] = "19"
        data["samples"].insert(0, second)

    path = edited(tmp_path, "arith_json", change)
    call = wire("arith_json")[0]
    with serving([path]) as url, httpx.Client(base_url=url) as http:
        texts = [http.post("/chat/completions", json=call["request"]).json()["choices"][0]
                 ["message"]["content"] for _ in range(2)]
        assert texts == [call["response"]["choices"][0]["message"]["content"], "19"]
        assert_error(http.post("/chat/completions", json=call["request"]), 400,
                     "replay_exhausted")


def test_broken_logs_name_the_file_and_the_field(tmp_path: Path) -> None:
    def change(samples: dict[str, Any], _: Any) -> None:
        model_events(samples["multi"])[0]["call"]["call_refs"] = [[0, 99]]

    path = edited(tmp_path, "arith_json", change)
    with pytest.raises(LoadError) as error:
        load([path], progress=False)
    assert (error.value.file, error.value.field) == (str(path), "call.call_refs")
    assert str(error.value).startswith(
        f"{path} (sample 'multi', epoch 1, model call 0): field `call.call_refs`: [0, 99] is "
        "not a range")
    cut = tmp_path / "cut" / path.name
    cut.parent.mkdir()
    cut.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(LoadError, match="not valid JSON"):
        load([cut], progress=False)


def test_a_damaged_eval_member_is_named(tmp_path: Path) -> None:
    source = next((DATA / "arith").glob("*.eval"))
    data = bytearray(source.read_bytes())
    at = data.index(b"samples/q2_epoch_1.json") + len("samples/q2_epoch_1.json") + 40
    data[at] ^= 0xFF
    path = tmp_path / source.name
    path.write_bytes(bytes(data))
    with pytest.raises(LoadError, match=r"samples/q2_epoch_1\.json: (bad Zstandard|CRC)"):
        load([path], progress=False)
    loaded = load([path], progress=False, skip_bad_lines=True)
    assert loaded.index.models["tiny-model"].records == 6


# inspect_ai's own writer, with its frame size (200 MiB of input) made small: every member
# of the log it writes spans several Zstandard frames.
WRITE_MULTI_FRAME = """
import sys
import inspect_ai._util.zipfile as zipfile_helpers
from inspect_ai.log import read_eval_log, write_eval_log
zipfile_helpers._MAX_INPUT_PER_FRAME = 2048
write_eval_log(read_eval_log(sys.argv[1]), sys.argv[2])
"""


def zstd_frames(path: Path, member: str) -> int:
    import zipfile

    import zstandard
    with zipfile.ZipFile(path) as archive, path.open("rb") as raw:
        info = archive.getinfo(member)
        raw.seek(info.header_offset + 26)
        skip = int.from_bytes(raw.read(2), "little") + int.from_bytes(raw.read(2), "little")
        data = raw.read(skip)[skip:] + raw.read(info.compress_size)
    frames = 0
    while data:
        frames += 1
        reader = zstandard.ZstdDecompressor().decompressobj()
        reader.decompress(data)
        data = reader.unused_data
    return frames


@pytest.mark.harness  # inspect_ai's own writer makes the log
def test_members_written_in_several_zstd_frames_are_read_whole(tmp_path: Path) -> None:
    source = next((DATA / "arith").glob("*.eval"))
    path = tmp_path / source.name
    subprocess.run([sys.executable, "-c", WRITE_MULTI_FRAME, source, path], check=True,
                   capture_output=True)
    assert zstd_frames(path, "samples/tool_epoch_1.json") > 3

    def saved(p: Path) -> list[bytes]:  # the writer puts the members in another order
        return sorted(orjson.dumps([r.request, r.response, r.source["instance"]],
                                   option=orjson.OPT_SORT_KEYS) for r in records(p))
    assert saved(path) == saved(source) and len(saved(path)) == 7


def test_a_member_bigger_than_its_zip_entry_says_is_refused(tmp_path: Path) -> None:
    source = next((DATA / "arith").glob("*.eval"))
    data = bytearray(source.read_bytes())
    entry = data.index(b"samples/q1_epoch_1.json", data.index(b"PK\x01\x02")) - 46
    size = int.from_bytes(data[entry + 24:entry + 28], "little")
    data[entry + 24:entry + 28] = (size - 100).to_bytes(4, "little")  # the unpacked size
    path = tmp_path / source.name
    path.write_bytes(bytes(data))
    with pytest.raises(LoadError, match=rf"q1_epoch_1\.json: unpacks to more than the "
                                        rf"{size - 100} bytes"):
        load([path], progress=False)


def test_inspect_and_convert(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "replay_server"]
    human = subprocess.run([*cli, "inspect", DATA], capture_output=True, text=True, cwd=ROOT,
                           check=True).stdout
    # 7 chat prompts (4 logs), 8 Responses API prompts (2 logs: the tool call's follow-up
    # echoes the call item's id, which differs between the two runs), 7 chat prompts of the
    # `openai/` provider's --batch log (its system prompt is a `developer` message)
    assert "model tiny-model: 49 records, 22 prompts" in human
    out = tmp_path / "inspect.jsonl"
    subprocess.run([*cli, "convert", DATA, "-o", out], cwd=ROOT, check=True,
                   capture_output=True)
    assert load([out], progress=False).index.models == load([DATA], progress=False).index.models
