"""Write the golden streams: the exact bytes replay-server streams for representative saved
answers, so that a change to how streams are made shows as a changed byte.

    .venv/bin/python tests/data/gen/make_golden_streams.py

writes `tests/data/golden_streams/cases.jsonl` (one case a line: the endpoint, the saved
answers that answer the request, a recorded stream's frames if any, `include_usage`) and
`tests/data/golden_streams/<name>.sse` (the bytes sent). `tests/wire/test_golden_streams.py`
streams every case with the live code and compares. Chat, completions and Responses, made
from saved bodies (small deltas: unicode, logprobs that spell the text and that do not,
reasoning, refusals, tool calls, several choices, answers assembled from several samples
or from a batch) and from recorded frames (sent as recorded, a usage chunk dropped or
added, frames of other line ends, a text holding `[DONE]`), `include_usage` both ways, and
the bench's realistic answers. Regenerate only for a change meant to change the bytes,
and say why in the commit.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from bench import gen_run  # noqa: E402
from replay_server.paths import CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH  # noqa: E402
from tests.wire.golden import OUT, stream  # noqa: E402

UNICODE = ("Ünïcödé: 漢字 and ٣² — “quotes” \"escaped\" back\\slash\ttab\r\nnew line"
           "\x1f\u2028\u3000 NBSP\u00a0 zero\x00 mark\\u0000 😀 "
           "a-word-longer-than-sixteen-characters_and_more end.  ")
ENTRIES = [{"token": t, "logprob": -0.25, "bytes": None, "top_logprobs": []}
           for t in ("The", " answer", " is", " 4", ".")]


def chat(*choices: dict[str, Any], usage: Any = None, **envelope: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-golden", "object": "chat.completion", "created": 1767225600,
            "model": "golden/model", **envelope,
            "choices": [{"index": i, **c} for i, c in enumerate(choices)],
            "usage": usage or {"prompt_tokens": 12, "completion_tokens": 5,
                               "total_tokens": 17}}


def message(content: Any, finish: str = "stop", logprobs: Any = None, **fields: Any
            ) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": content, **fields},
            "logprobs": logprobs, "finish_reason": finish}


def completion(*texts: str, logprobs: list[Any] | None = None) -> dict[str, Any]:
    return {"id": "cmpl-golden", "object": "text_completion", "created": 1767225600,
            "model": "golden/model",
            "choices": [{"index": i, "text": t,
                         "logprobs": (logprobs or [None] * len(texts))[i],
                         "finish_reason": "length" if i else "stop"}
                        for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}}


def response(*output: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    return {"id": "resp_golden", "object": "response", "created_at": 1767225600,
            "model": "golden/model", "status": status,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete" else None,
            "output": list(output),
            "usage": {"input_tokens": 11, "output_tokens": 6, "total_tokens": 17}}


TOOL_CALLS = [{"id": "call_1", "type": "function",
               "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": [2, 3]}"}},
              {"id": "call_2", "type": "function", "function": {"name": "now",
                                                                "arguments": None}}]
COMPLETION_LOGPROBS = {"tokens": [" Paris", ",", " France"],
                       "token_logprobs": [-0.1, -0.2, -0.3],
                       "top_logprobs": [{" Paris": -0.1}, {",": -0.2}, {" France": -0.3}],
                       "text_offset": [0, 6, 7]}


def saved_bodies() -> dict[str, tuple[str, dict[str, Any]]]:
    """Answers saved as bodies: streamed in small deltas."""
    return {
        "chat-plain": (CHAT_PATH, chat(message("The answer is 4."), system_fingerprint="fp")),
        "chat-unicode": (CHAT_PATH, chat(message(UNICODE))),
        "chat-reasoning-refusal": (CHAT_PATH, chat(message(
            "Four.", reasoning="2 plus 2 is 4, said simply.", refusal=None),
            message(None, refusal="I can't help with that.", reasoning_content="Policy."))),
        "chat-logprobs-spelled": (CHAT_PATH, chat(message(
            "The answer is 4.", logprobs={"content": ENTRIES, "refusal": None}))),
        "chat-logprobs-other": (CHAT_PATH, chat(message(
            "The answer is four.", logprobs={"content": ENTRIES}))),
        "chat-tool-calls": (CHAT_PATH, chat(message(None, "tool_calls",
                                                    tool_calls=TOOL_CALLS))),
        "chat-n3-stop-reason": (CHAT_PATH, chat(
            {**message("a b"), "stop_reason": None}, {**message("c", "length"),
                                                      "stop_reason": 42},
            message(""))),
        "completions-plain": (COMPLETION_PATH, completion(" Paris is the capital.")),
        "completions-unicode-n2": (COMPLETION_PATH, completion(UNICODE, " 漢字")),
        "completions-logprobs": (COMPLETION_PATH, completion(
            " Paris, France", " Lyon", logprobs=[COMPLETION_LOGPROBS, {
                "tokens": ["x"], "token_logprobs": [-1.0], "top_logprobs": None,
                "text_offset": [0]}])),
        "responses-text": (RESPONSES_PATH, response(
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": UNICODE, "annotations": []}]})),
        "responses-reasoning-tools": (RESPONSES_PATH, response(
            {"id": "rs_1", "type": "reasoning",
             "summary": [{"type": "summary_text", "text": "Add them."}],
             "content": [{"type": "reasoning_text", "text": "1 + 2 = 3, so call add."}]},
            {"type": "function_call", "call_id": "call_1", "name": "add",
             "arguments": "{\"a\": 1, \"b\": 2}", "status": "completed"},
            {"id": "ct_1", "type": "custom_tool_call", "call_id": "c2", "name": "shell",
             "input": "ls -la"},
            {"id": "ws_1", "type": "web_search_call", "status": "completed"})),
        "responses-logprobs-incomplete": (RESPONSES_PATH, response(
            {"id": "msg_2", "type": "message", "role": "assistant", "status": "incomplete",
             "content": [{"type": "output_text", "text": "The answer is 4.",
                          "annotations": [], "logprobs": ENTRIES},
                         {"type": "refusal", "refusal": "No more."}]},
            status="incomplete")),
    }


def bench_bodies() -> dict[str, tuple[str, dict[str, Any]]]:
    rng = random.Random(15)
    found = {}
    for i in range(1):
        found[f"bench-chat-{i}"] = (CHAT_PATH, gen_run.chat_record(i, rng)["response"])
        found[f"bench-completions-{i}"] = (COMPLETION_PATH,
                                           gen_run.completion_record(i, rng)["response"])
        found[f"bench-responses-{i}"] = (RESPONSES_PATH,
                                         gen_run.responses_record(i, rng)["response"])
    return found  # type: ignore[return-value]


def cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    bodies = {**saved_bodies(), **bench_bodies()}
    for name, (endpoint, body) in bodies.items():
        both = endpoint != RESPONSES_PATH and not name.startswith("bench")
        for usage in (False, True) if both else (False,):
            out.append({"name": f"{name}{'-usage' if usage else ''}", "endpoint": endpoint,
                        "answers": [[[body, None]]], "include_usage": usage})
    for name in ("responses-logprobs-incomplete", "responses-reasoning-tools"):
        out.append({"name": f"{name}-openai-terminal", "endpoint": RESPONSES_PATH,
                    "answers": [[[bodies[name][1], None]]], "include_usage": False,
                    "terminal_by_status": True})
    # assembled from several saved answers: samples of one prompt, a batch of two prompts
    two = chat(message("a b"), message("c d"),
               usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
    one = chat(message("e f"))
    out.append({"name": "chat-samples-assembled-usage", "endpoint": CHAT_PATH,
                "answers": [[[two, 1], [one, None]]], "include_usage": True})
    out.append({"name": "completions-batch-assembled-usage", "endpoint": COMPLETION_PATH,
                "answers": [[[completion(" x y"), None]], [[completion(" z"), None]]],
                "include_usage": True})
    out += recorded_cases(bodies)
    return out


def recorded_cases(bodies: dict[str, tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Recorded streams: frames as an upstream sent them (made here by streaming a body,
    then reshaped as upstreams and proxies do)."""
    out = []
    plain_with_usage = {"name": "", "endpoint": CHAT_PATH, "include_usage": True}
    for name in ("chat-plain", "chat-tool-calls", "completions-logprobs", "chat-unicode"):
        endpoint, body = bodies[name]
        for recorded_usage in (False, True):
            frames = stream({**plain_with_usage, "endpoint": endpoint,
                             "answers": [[[body, None]]], "include_usage": recorded_usage})
            saved = body if recorded_usage else {**body, "usage": None}
            for usage in (False, True):
                out.append({"name": f"recorded-{name}-{'with' if recorded_usage else 'no'}"
                                    f"-usage-asked-{usage}", "endpoint": endpoint,
                            "answers": [[[saved, None]]], "include_usage": usage,
                            "recorded": frames.decode(), "recorded_usage": recorded_usage})
    endpoint, body = bodies["chat-plain"]
    frames = stream({**plain_with_usage, "answers": [[[body, None]]],
                     "include_usage": True}).decode()
    reshaped = {
        "crlf": frames.replace("\n", "\r\n"), "cr": frames.replace("\n", "\r"),
        "comments-and-events": ": keep-alive\n\n" + frames.replace(
            "data: {", "event: chunk\ndata: {", 2),
    }
    for name, recorded in reshaped.items():
        for usage in (False, True):
            out.append({"name": f"recorded-{name}-usage-asked-{usage}", "endpoint": CHAT_PATH,
                        "answers": [[[body, None]]], "include_usage": usage,
                        "recorded": recorded, "recorded_usage": True})
    done = chat(message("Streams end with data: [DONE]. The usage is \"usage\".",
                        logprobs={"content": [
                            {"token": t, "logprob": -0.5, "bytes": None, "top_logprobs": []}
                            for t in ("Streams end with ", "data: [DONE]", ". The usage is ",
                                      "\"usage\"", ".")]}))
    done_frames = stream({**plain_with_usage, "answers": [[[done, None]]],
                          "include_usage": False}).decode()
    out.append({"name": "recorded-done-in-text-usage-asked-True", "endpoint": CHAT_PATH,
                "answers": [[[{**done, "usage": None}, None]]], "include_usage": True,
                "recorded": done_frames, "recorded_usage": False})
    endpoint, body = bodies["responses-reasoning-tools"]
    out.append({"name": "recorded-responses", "endpoint": RESPONSES_PATH,
                "answers": [[[body, None]]], "include_usage": False,
                "recorded": stream({"endpoint": endpoint, "answers": [[[body, None]]],
                                    "include_usage": False}).decode(),
                "recorded_usage": False})
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.sse"):
        old.unlink()
    made = cases()
    with (OUT / "cases.jsonl").open("wb") as f:
        for case in made:
            f.write(orjson.dumps(case) + b"\n")
    for case in made:
        (OUT / f"{case['name']}.sse").write_bytes(stream(case))
    print(f"wrote {len(made)} golden streams to {OUT}")


if __name__ == "__main__":
    main()
