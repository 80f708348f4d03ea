"""The ceiling: a raw ASGI app that answers every request with fixed bytes.

It reads the request body (as any server must) and returns a realistic chat completion
body without parsing, matching or routing anything. Run on the same uvicorn settings as
replay-server, it is what a Python server on this machine can do at best.
"""

from __future__ import annotations

from typing import Any

import orjson

BODY = orjson.dumps({
    "id": "chatcmpl-baseline", "object": "chat.completion", "created": 1767225600,
    "model": "bench/model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "x " * 500,
                                         "refusal": None, "reasoning": None},
                 "logprobs": None, "finish_reason": "stop", "stop_reason": None}],
    "system_fingerprint": "vllm-0.33.0-bench",
    "usage": {"prompt_tokens": 300, "completion_tokens": 220, "total_tokens": 520},
})
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
