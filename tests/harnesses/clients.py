"""One client session, as a script: `python -m tests.harnesses.clients openai|litellm URL`.

Sync, async and streamed requests, n > 1, sampled repeats, a tool call, a length cut, a
completions batch, and 64 requests in flight at once; prints what the client got back as
JSON (per request: each choice's text, reasoning, finish_reason, tool calls, and usage),
so that a session recorded through `replay-server record` and the same session replayed
by `replay-server serve` can be compared whole. A script, not a test, so that litellm's
import-time setup stays out of the pytest process.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

MODEL = "tiny-model"
IN_FLIGHT = 64
TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}]


def ask(i: int, op: str = "+") -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Answer with 'The answer is N.'"},
            {"role": "user", "content": f"What is {i} {op} {i + 5}?"}]


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    extra = getattr(obj, "model_extra", None) or {}
    return value if value is not None else extra.get(name)


def _usage(usage: Any) -> Any:
    if usage is None:
        return None
    return [_get(usage, k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")]


def _calls(calls: Any) -> Any:
    return [[_get(c, "id"), _get(_get(c, "function"), "name"),
             _get(_get(c, "function"), "arguments")] for c in calls] if calls else None


def whole(r: Any) -> dict[str, Any]:
    """A non-streamed answer: its choices and usage."""
    choices = []
    for c in r.choices:
        m = _get(c, "message")
        reasoning = _get(m, "reasoning") or _get(m, "reasoning_content") if m else None
        choices.append([c.index, _get(m, "content") if m else _get(c, "text"), reasoning,
                        c.finish_reason, _calls(_get(m, "tool_calls") if m else None)])
    return {"choices": choices, "usage": _usage(_get(r, "usage"))}


class Streamed:
    """A streamed answer, put back together per choice index."""

    def __init__(self) -> None:
        self.choices: dict[int, list[Any]] = {}
        self.usage: Any = None

    def add(self, chunk: Any) -> None:
        if _get(chunk, "usage") is not None:
            self.usage = _usage(chunk.usage)
        for c in chunk.choices or []:
            got = self.choices.setdefault(c.index, [c.index, "", "", None])
            delta = _get(c, "delta")
            text = _get(delta, "content") if delta is not None else _get(c, "text")
            got[1] += text or ""
            if delta is not None:
                got[2] += _get(delta, "reasoning") or _get(delta, "reasoning_content") or ""
            got[3] = c.finish_reason or got[3]

    def result(self) -> dict[str, Any]:
        return {"choices": [self.choices[i] for i in sorted(self.choices)],
                "usage": self.usage}


class OpenAISession:
    def __init__(self, url: str) -> None:
        import openai
        self.sync = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        self.aio = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)

    def chat(self, messages: Any, **kw: Any) -> Any:
        return self.sync.chat.completions.create(model=MODEL, messages=messages, **kw)

    def completion(self, prompt: Any, **kw: Any) -> Any:
        return self.sync.completions.create(model=MODEL, prompt=prompt, **kw)

    async def achat(self, messages: Any, **kw: Any) -> Any:
        return await self.aio.chat.completions.create(model=MODEL, messages=messages, **kw)


class LiteLLMSession:
    def __init__(self, url: str) -> None:
        import litellm
        litellm.telemetry = False
        self.litellm = litellm
        self.common = {"model": "openai/" + MODEL, "api_base": url, "api_key": "x",
                       "num_retries": 0}

    def chat(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        return self.litellm.completion(messages=messages, **self.common, **kw)

    def completion(self, prompt: Any, **kw: Any) -> Any:
        return self.litellm.text_completion(prompt=prompt, **self.common, **kw)

    async def achat(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        return await self.litellm.acompletion(messages=messages, **self.common, **kw)


def stream(chunks: Any) -> dict[str, Any]:
    got = Streamed()
    for chunk in chunks:
        got.add(chunk)
    return got.result()


async def in_flight(session: Any) -> list[dict[str, Any]]:
    """IN_FLIGHT requests at once, every other one streamed."""
    async def one(i: int) -> dict[str, Any]:
        if i % 2:
            got = Streamed()
            async for chunk in await session.achat(ask(100 + i), stream=True):
                got.add(chunk)
            return got.result()
        return whole(await session.achat(ask(100 + i), temperature=0))
    return list(await asyncio.gather(*(one(i) for i in range(IN_FLIGHT))))


def main(kind: str, url: str) -> dict[str, Any]:
    s = OpenAISession(url) if kind == "openai" else LiteLLMSession(url)
    out: dict[str, Any] = {}
    out["greedy"] = [whole(s.chat(ask(i), temperature=0)) for i in range(4)]
    out["length"] = whole(s.chat(ask(5, "*"), max_tokens=3, temperature=0))
    out["n3"] = whole(s.chat(ask(6), n=3, temperature=0.8))
    out["repeats"] = [whole(s.chat(ask(7), temperature=0.8)) for _ in range(3)]
    out["tool"] = whole(s.chat([{"role": "user", "content": "Please use the calculator: "
                                 "what is 123 * 45?"}], tools=TOOLS, temperature=0))
    out["stream"] = stream(s.chat(ask(8), stream=True, stream_options={"include_usage": True},
                                  **({"n": 2} if kind == "openai" else {})))
    out["batch"] = whole(s.completion([f"Question: What is {i} + 2?\nAnswer:" for i in range(3)],
                                      max_tokens=12, stop=["\n"], temperature=0))
    out["in_flight"] = asyncio.run(in_flight(s))
    return out


if __name__ == "__main__":
    json.dump(main(sys.argv[1], sys.argv[2]), sys.stdout)
