"""Anthropic's Messages API for the fake model: `POST /v1/messages` (streamed or not) and
`POST /v1/messages/count_tokens`, in the shapes of Anthropic's API.

The Messages request is turned into a chat request and answered by the chat behaviour
(`bodies.build_chat`), so all the fake's APIs give the same answers for the same
conversation: `system` (a string or text blocks) -> a leading system message; each
message's text blocks -> its text; `tool_use` blocks -> assistant `tool_calls` and
`tool_result` blocks -> `tool` messages; `thinking` blocks are left out (as the API drops
earlier turns' thinking); `tools` (`name`, `input_schema`) -> chat tools; `max_tokens`
(required, as the API requires it), `stop_sequences`, `temperature` pass through.

The answer: a `thinking` block (the chat answer's reasoning, or a fixed thought, with a
deterministic `signature`) when `thinking` is enabled, a `text` block and/or a `tool_use` block
(`toolu_<hex>`); `stop_reason` `end_turn`, `max_tokens`, `stop_sequence` (with
`stop_sequence` set) or `tool_use`; `usage` with the cache fields (0) and
`service_tier: standard`; a `request-id` header. Errors are Anthropic's envelope (400
`invalid_request_error`, 401 `authentication_error` without an `x-api-key` header).
Streams are the API's named events: `message_start`, a `ping`, per block
`content_block_start`, one delta per token (`thinking_delta`, one `signature_delta`,
`text_delta`, `input_json_delta`), `content_block_stop`, then `message_delta` (the
`stop_reason`, `usage` with `output_tokens`) and `message_stop`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakemodel.behaviour import FakeModel, chat_prompt_tokens, tokenize
from tests.fakemodel.bodies import build_chat

_STOPS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def error(message: str, status: int = 400, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}},
                        status_code=status, headers={"request-id": "req_fake_error"})


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict)
                   and b.get("type") == "text")


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation of a Messages request as chat messages."""
    out: list[dict[str, Any]] = []
    if body.get("system"):
        out.append({"role": "system", "content": _text(body["system"])})
    for message in body["messages"]:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        for result in results:
            out.append({"role": "tool", "tool_call_id": result.get("tool_use_id"),
                        "content": _text(result.get("content"))})
        calls = [{"id": b.get("id"), "type": "function", "function": {
            "name": b.get("name"), "arguments": json.dumps(b.get("input"))}}
            for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        text = _text(content)
        if text or calls or not results:
            chat: dict[str, Any] = {"role": message["role"], "content": text}
            if calls:
                chat["tool_calls"] = calls
            out.append(chat)
    return out


def build_message(fm: FakeModel, body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise ValueError("messages: Field required")
    if not isinstance(body.get("max_tokens"), int):
        raise ValueError("max_tokens: Field required")
    tools = [{"type": "function", "function": {"name": t.get("name"),
                                               "parameters": t.get("input_schema")}}
             for t in body.get("tools") or []]
    chat_body: dict[str, Any] = {"model": body.get("model"), "messages": chat_messages(body),
                                 "max_tokens": body["max_tokens"],
                                 "temperature": body.get("temperature", 1.0)}
    if tools:
        chat_body["tools"] = tools
    if body.get("stop_sequences"):
        chat_body["stop"] = body["stop_sequences"]
    chat = build_chat(fm, chat_body)
    choice = chat["choices"][0]
    message = choice["message"]
    content: list[dict[str, Any]] = []
    thinking = (body.get("thinking") or {}).get("type") == "enabled"
    if thinking:  # (the chat answer's reasoning, when it has one)
        thought = message.get("reasoning") or "I work it out step by step."
        signature = hashlib.sha256(thought.encode()).hexdigest()
        content.append({"type": "thinking", "thinking": thought, "signature": "Eq" + signature})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        content.append({"type": "tool_use", "id": "toolu_" + call["id"][-24:],
                        "name": call["function"]["name"],
                        "input": json.loads(call["function"]["arguments"])})
    stop = _STOPS.get(choice["finish_reason"], "end_turn")
    sequence = choice.get("stop_reason") if isinstance(choice.get("stop_reason"), str) else None
    if sequence is not None:
        stop = "stop_sequence"
    return {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
            "model": body.get("model") or fm.models[0], "content": content,
            "stop_reason": stop, "stop_sequence": sequence,
            "usage": {"input_tokens": chat["usage"]["prompt_tokens"],
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                      "output_tokens": chat["usage"]["completion_tokens"],
                      "service_tier": "standard"}}


def message_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The events Anthropic's API streams for `message`, one delta per token."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**message["usage"], "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start},
                                    {"type": "ping"}]
    for index, block in enumerate(message["content"]):
        def delta(body: dict[str, Any], index: int = index) -> dict[str, Any]:
            return {"type": "content_block_delta", "index": index, "delta": body}
        if block["type"] == "thinking":
            events.append({"type": "content_block_start", "index": index, "content_block": {
                "type": "thinking", "thinking": "", "signature": ""}})
            events += [delta({"type": "thinking_delta", "thinking": t})
                       for t in tokenize(block["thinking"])]
            events.append(delta({"type": "signature_delta", "signature": block["signature"]}))
        elif block["type"] == "text":
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}})
            events += [delta({"type": "text_delta", "text": t}) for t in tokenize(block["text"])]
        else:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {**block, "input": {}}})
            events += [delta({"type": "input_json_delta", "partial_json": t})
                       for t in tokenize(json.dumps(block["input"]))]
        events.append({"type": "content_block_stop", "index": index})
    events += [{"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                                                   "stop_sequence": message["stop_sequence"]},
                "usage": {"output_tokens": message["usage"]["output_tokens"]}},
               {"type": "message_stop"}]
    return events


def frame(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


def routes(fm: FakeModel) -> list[Route]:
    async def body_of(request: Request) -> dict[str, Any] | JSONResponse:
        if not request.headers.get("x-api-key") and not request.headers.get("authorization"):
            return error("x-api-key header is required", 401, "authentication_error")
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            return error(f"invalid JSON body: {e}")
        return body if isinstance(body, dict) else error("body must be a JSON object")

    async def create(request: Request) -> Response:
        body = await body_of(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            out = build_message(fm, body)
        except (ValueError, TypeError, KeyError) as e:
            bad = error(str(e))
            fm.log({"path": request.url.path, "request": body, "status": 400,
                    "response": json.loads(bytes(bad.body))})
            return bad
        headers = {"request-id": "req_" + uuid.uuid4().hex[:24]}
        if body.get("stream"):
            events = message_events(out)
            fm.log({"path": request.url.path, "request": body, "response": out,
                    "chunks": events, "headers": dict(request.headers)})

            async def gen() -> AsyncIterator[str]:
                for event in events:
                    yield frame(event)

            return StreamingResponse(gen(), media_type="text/event-stream", headers=headers)
        fm.log({"path": request.url.path, "request": body, "response": out,
                "headers": dict(request.headers)})
        return JSONResponse(out, headers=headers)

    async def count(request: Request) -> Response:
        body = await body_of(request)
        if isinstance(body, JSONResponse):
            return body
        if not isinstance(body.get("messages"), list):
            return error("messages: Field required")
        tokens = chat_prompt_tokens(chat_messages(body), body.get("tools") or None)
        out = {"input_tokens": tokens}
        fm.log({"path": request.url.path, "request": body, "response": out})
        return JSONResponse(out, headers={"request-id": "req_" + uuid.uuid4().hex[:24]})

    return [Route("/v1/messages", create, methods=["POST"]),
            Route("/v1/messages/count_tokens", count, methods=["POST"])]
