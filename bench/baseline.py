"""The ceilings: a raw ASGI app that answers every request with fixed bytes.

It reads the request body (as any server must) and returns fixed bytes without parsing,
matching or routing anything. Run on the same uvicorn settings as replay-server, it is
what a Python server on this machine can do at best.

Two kinds of ceiling:

- the chat ceiling (no query string): a realistic chat completion body of about 1.2 KB;
- same-bytes ceilings (`?w=WORKLOAD`): the exact status, headers and body that
  replay-server sent for one request of that workload, captured by bench/run.py before
  the rounds and named by the environment variable BENCH_PAYLOADS (a JSON file:
  {workload: {"status", "headers": [[name, value], ...], "body_b64"}}). A body whose
  headers carry no content-length is sent as replay-server sends a stream: in one write,
  which uvicorn frames as one chunk (transfer-encoding: chunked). uvicorn adds `date`
  and `server` to both servers' answers alike.

The query string is looked up whole in a dict, which is all the routing this app does.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
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

Payload = tuple[int, list[tuple[bytes, bytes]], bytes]


def load_payloads(path: str | None) -> dict[bytes, Payload]:
    """Query string (b"w=NAME") -> the captured answer of workload NAME."""
    if not path:
        return {}
    saved = orjson.loads(Path(path).read_bytes())
    return {f"w={name}".encode(): (int(p["status"]),
                                   [(k.encode("latin-1"), v.encode("latin-1"))
                                    for k, v in p["headers"]],
                                   base64.b64decode(p["body_b64"]))
            for name, p in saved.items()}


PAYLOADS = load_payloads(os.environ.get("BENCH_PAYLOADS"))
DEFAULT: Payload = (200, HEADERS, BODY)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    status, headers, body = PAYLOADS.get(scope["query_string"], DEFAULT)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
