"""Hypothesis strategies for saved answers to stream: chat, completions and Responses
bodies with unicode text (every kind of whitespace, long words, the characters the stream
templates mark with), tool calls, logprobs, several choices, reasoning."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Atoms that make piece boundaries interesting: unicode whitespace (\x1c-\x1f, NBSP, the
# line separator), word characters of other scripts and digits, `_`, punctuation, long
# words, and what the templates use as marks.
ATOMS = st.sampled_from([
    "a", "b", "word", " ", "  ", "\n", "\t", "\r\n", "\x1c", "\x1f", "\x85", "\u00a0",
    "\u2028", "\u3000", "é", "漢字", "٣", "²", "_", ".", ",", "!", "'", "\"", "\\", "/",
    "😀", "\x00", "\x01", "\\u0000", "x" * 17, "y" * 33, "-", "$", " .", "\ufeff", "\u200b"])
TEXTS = st.one_of(st.lists(ATOMS, max_size=25).map("".join),
                  st.text(st.characters(codec="utf-8"), max_size=40))
NUMBERS = st.floats(-20, 0, allow_nan=False)


@st.composite
def chat_logprobs(draw: st.DrawFn, content: str | None) -> Any:
    kind = draw(st.sampled_from(["none", "none", "spelled", "other"]))
    if kind == "none":
        return None
    if kind == "spelled" and content:
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(content) - 1)), max_size=5)))
        tokens = [content[a:b] for a, b in zip([0, *cuts], [*cuts, len(content)], strict=True)]
        tokens = [t for t in tokens if t]
    else:
        tokens = draw(st.lists(TEXTS, max_size=3))
    entries: list[dict[str, Any]] = [
        {"token": t, "logprob": draw(NUMBERS), "bytes": None, "top_logprobs": []}
        for t in tokens]
    return {"content": entries, **draw(st.sampled_from([{}, {"refusal": None}]))}


@st.composite
def tool_calls(draw: st.DrawFn) -> list[Any]:
    calls: list[Any] = []
    for i in range(draw(st.integers(0, 2))):
        arguments: Any = draw(st.one_of(TEXTS, TEXTS, st.none()))
        calls.append({"id": f"call_{i}", "type": "function",
                      "function": {"name": draw(st.sampled_from(["f", "g"])),
                                   "arguments": arguments}})
    return calls


@st.composite
def chat_choice(draw: st.DrawFn, index: int) -> dict[str, Any]:
    content = draw(st.one_of(TEXTS, TEXTS, st.none()))
    message: dict[str, Any] = {"role": "assistant", "content": content}
    for name in ("reasoning", "reasoning_content", "refusal"):
        if draw(st.integers(0, 3)) == 0:
            message[name] = draw(st.one_of(TEXTS, st.none()))
    calls = draw(tool_calls())
    if calls:
        message["tool_calls"] = calls
    choice = {"index": index, "message": message, "logprobs": draw(chat_logprobs(content)),
              "finish_reason": draw(st.sampled_from(["stop", "length", "tool_calls", None]))}
    if draw(st.booleans()):
        choice["stop_reason"] = draw(st.sampled_from([None, 42, "</s>"]))
    return choice


USAGE = st.one_of(st.none(), st.fixed_dictionaries({
    "prompt_tokens": st.integers(0, 99), "completion_tokens": st.integers(0, 99),
    "total_tokens": st.integers(0, 200)}))


@st.composite
def chat_bodies(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 3))
    body = {"id": draw(st.sampled_from(["chatcmpl-1", "chatcmpl-é\x00"])),
            "object": "chat.completion", "created": 1700000000, "model": "m",
            "choices": [draw(chat_choice(i)) for i in range(n)], "usage": draw(USAGE)}
    if draw(st.booleans()):
        body["system_fingerprint"] = "fp"
    return body


@st.composite
def completion_bodies(draw: st.DrawFn) -> dict[str, Any]:
    choices = []
    for i in range(draw(st.integers(1, 3))):
        text = draw(TEXTS)
        logprobs: Any = None
        kind = draw(st.sampled_from(["none", "spelled", "other"]))
        if kind != "none":
            tokens = list(text) if kind == "spelled" else draw(st.lists(TEXTS, max_size=3))
            logprobs = {"tokens": tokens, "token_logprobs": [-0.5] * len(tokens),
                        "top_logprobs": [None] * len(tokens),
                        "text_offset": list(range(len(tokens)))}
        choices.append({"index": i, "text": text, "logprobs": logprobs,
                        "finish_reason": draw(st.sampled_from(["stop", "length"]))})
    return {"id": "cmpl-1", "object": "text_completion", "created": 1700000000,
            "model": "m", "choices": choices, "usage": draw(USAGE)}


@st.composite
def output_items(draw: st.DrawFn, index: int) -> Any:
    kind = draw(st.sampled_from(["message", "message", "reasoning", "function_call",
                                 "custom_tool_call", "other"]))
    if kind == "message":
        parts = []
        for _ in range(draw(st.integers(0, 2))):
            text = draw(TEXTS)
            if draw(st.integers(0, 4)) == 0:
                parts.append({"type": "refusal", "refusal": text})
                continue
            part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
            if draw(st.booleans()):
                tokens = [c for c in text] if draw(st.booleans()) else ["x"]
                part["logprobs"] = [{"token": t, "logprob": -1.0, "bytes": [],
                                     "top_logprobs": []} for t in tokens]
            parts.append(part)
        return {"id": f"msg_{index}", "type": "message", "role": "assistant",
                "status": "completed", "content": parts}
    if kind == "reasoning":
        return {"id": f"rs_{index}", "type": "reasoning",
                "summary": [{"type": "summary_text", "text": draw(TEXTS)}
                            for _ in range(draw(st.integers(0, 2)))],
                "content": [{"type": "reasoning_text", "text": draw(TEXTS)}]}
    if kind == "function_call":
        item = {"type": "function_call", "call_id": "c", "name": "f",
                "arguments": draw(TEXTS), "status": "completed"}
        return item if draw(st.booleans()) else {"id": f"fc_{index}", **item}
    if kind == "custom_tool_call":
        return {"id": f"ct_{index}", "type": "custom_tool_call", "call_id": "c", "name": "t",
                "input": draw(TEXTS)}
    return {"id": f"ws_{index}", "type": "web_search_call", "status": "completed"}


@st.composite
def responses_bodies(draw: st.DrawFn) -> dict[str, Any]:
    output = [draw(output_items(i)) for i in range(draw(st.integers(0, 3)))]
    body = {"id": "resp_1", "object": "response", "created_at": 1700000000, "model": "m",
            "status": draw(st.sampled_from(["completed", "incomplete", "failed"])),
            "output": output, "usage": draw(USAGE)}
    if draw(st.booleans()):
        body["incomplete_details"] = {"reason": "max_output_tokens"}
    return body
