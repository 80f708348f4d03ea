"""`POST /v1/responses` and `GET /v1/responses/{id}` for the fake model (vLLM 0.33 shapes).

The Responses request is turned into a chat request and answered by the chat behaviour
(`bodies.build_chat`), so both APIs give the same answers for the same conversation:

- `instructions` -> a leading system message (not carried over by `previous_response_id`,
  as in OpenAI's and vLLM's servers);
- `input` as a string -> one user message; as items: `message` items (with or without
  `"type": "message"`, content a string or `input_text`/`output_text` parts) keep their
  role (`developer` becomes `system`), `function_call` items become assistant
  `tool_calls`, `function_call_output` items `tool` messages, `reasoning` items the
  assistant's `reasoning` (consecutive assistant pieces merge into one message, as vLLM does);
- `previous_response_id` -> the stored conversation (its messages, then its output as an
  assistant message) goes before the new input; an unknown id is vLLM's 404;
- function `tools` (`{"type": "function", "name", "parameters", ...}`) -> chat tools;
  `tool_choice: "none"` hides them; `max_output_tokens` -> `max_tokens`; `temperature`,
  `top_p` and the vLLM extras `stop`, `seed` pass through.

The answer becomes output items: a `reasoning` item (`content: [{reasoning_text}]`), a
`message` item (one `output_text` part) and/or one `function_call` item. `status` is
`incomplete` (with `incomplete_details.reason: max_output_tokens`) when the answer was cut.

Streams use vLLM's framing (`event: <type>` + `data: <json>`, no `[DONE]`), sequence numbers
from 0: `response.created`, `response.in_progress`, then per item `output_item.added`,
(`content_part.added`, one `reasoning_text.delta`/`output_text.delta` per token,
`*.done`, `content_part.done`) or one `function_call_arguments.delta` per token and
`function_call_arguments.done`, `output_item.done`, and last `response.completed` carrying
the same body a non-streamed request gets (same ids). Unlike vLLM, stream and final body
share item ids (vLLM 0.33 gives the streamed items other ids than the final body's).

Responses are stored when `store` is not false (OpenAI's default; vLLM stores only with
`VLLM_ENABLE_RESPONSES_API_STORE=1`) and served by `GET /v1/responses/{id}`.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakemodel.behaviour import FakeModel, canonical, message_text, tokenize
from tests.fakemodel.bodies import build_chat

MAX_MODEL_LEN = 4096


class NotFound(Exception):
    """A `previous_response_id` that was never stored."""


def _error(message: str, status: int = 400, param: str | None = None,
           kind: str = "Bad Request") -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


def _not_found(response_id: str) -> JSONResponse:
    return _error(f"Response with id '{response_id}' not found.", 404, "response_id",
                  "invalid_request_error")


# --------------------------------------------------------------------------- input


def _text(content: Any) -> str:
    """The text of a message content: a string, or parts with `text` (input_text,
    output_text, text); other parts (images, files) carry no text for the fake model."""
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return message_text(content)


def _assistant(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The last message when it is an assistant message still open for merging."""
    if messages and messages[-1].get("role") == "assistant":
        return messages[-1]
    message: dict[str, Any] = {"role": "assistant", "content": None}
    messages.append(message)
    return message


def input_messages(items: Any) -> list[dict[str, Any]]:
    """Chat messages for a Responses `input` (a string or a list of items)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ValueError("input must be a string or a list of items")
    messages: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError("input items must be objects")
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise ValueError(f"unsupported message role {role!r}")
            text = _text(item.get("content"))
            if role == "assistant":
                open_message = _assistant(messages)
                if open_message["content"] is None:
                    open_message["content"] = text
                else:
                    messages.append({"role": "assistant", "content": text})
            else:
                messages.append({"role": "system" if role == "developer" else role,
                                 "content": text})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"),
                                 "arguments": item.get("arguments") or ""}}
            _assistant(messages).setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            messages.append({"role": "tool", "content": _text(item.get("output")),
                             "tool_call_id": item.get("call_id")})
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            open_message = _assistant(messages)
            open_message["reasoning"] = (open_message.get("reasoning") or "") + _text(parts)
        else:
            raise ValueError(f"unsupported input item type {kind!r}")
    return messages


def output_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A stored response's output items as the assistant message the model said."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    for item in output:
        if item["type"] == "message":
            message["content"] = (message["content"] or "") + _text(item["content"])
        elif item["type"] == "reasoning":
            message["reasoning"] = _text(item.get("content"))
        elif item["type"] == "function_call":
            message.setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function",
                 "function": {"name": item["name"], "arguments": item["arguments"]}})
    return [message]


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Responses function tools (flat) as chat tools; other tool types are ignored."""
    out = []
    for tool in tools or []:
        if isinstance(tool, dict) and tool.get("type") == "function":
            function = {k: tool[k] for k in ("name", "description", "parameters")
                        if tool.get(k) is not None}
            out.append({"type": "function", "function": function})
    return out or None


# --------------------------------------------------------------------------- body


def _hex() -> str:
    return uuid.uuid4().hex


def build_response(fm: FakeModel, body: dict[str, Any],
                   store: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
    """(the response body, the conversation messages to store with it)."""
    if "input" not in body:
        raise KeyError("input")
    history: list[dict[str, Any]] = []
    previous_id = body.get("previous_response_id")
    if previous_id is not None:
        previous = store.get(previous_id)
        if previous is None:
            raise NotFound(previous_id)
        history = [m for m in previous["messages"] if m.get("role") != "system"]
        history += output_messages(previous["response"]["output"])
    conversation = history + input_messages(body["input"])
    messages = list(conversation)
    if body.get("instructions"):
        messages.insert(0, {"role": "system", "content": body["instructions"]})
    tools = chat_tools(body.get("tools")) if body.get("tool_choice") != "none" else None
    temperature = body.get("temperature")
    chat_body: dict[str, Any] = {"model": body.get("model"), "messages": messages,
                                 "temperature": 1.0 if temperature is None else temperature}
    if tools:
        chat_body["tools"] = tools
    for name in ("stop", "seed", "top_p"):
        if body.get(name) is not None:
            chat_body[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat_body["max_tokens"] = body["max_output_tokens"]
    chat = build_chat(fm, chat_body)
    choice = chat["choices"][0]
    message = choice["message"]
    key = canonical({"messages": messages, "tools": tools})
    output: list[dict[str, Any]] = []
    if message.get("reasoning"):
        output.append({"id": "rs_" + _hex(), "summary": [], "type": "reasoning",
                       "content": [{"text": message["reasoning"], "type": "reasoning_text"}],
                       "encrypted_content": None, "status": None})
    if message.get("content"):
        output.append({"id": "msg_" + _hex(),
                       "content": [{"annotations": [], "text": message["content"],
                                    "type": "output_text", "logprobs": None}],
                       "role": "assistant", "status": "completed", "type": "message"})
    for call in message.get("tool_calls") or []:
        digest = hashlib.sha256(f"{key}|{call['id']}".encode()).hexdigest()[:24]
        output.append({"arguments": call["function"]["arguments"], "call_id": "call_" + digest,
                       "name": call["function"]["name"], "type": "function_call",
                       "id": "fc_" + _hex(), "status": "completed"})
    usage = chat["usage"]
    cut = choice["finish_reason"] == "length"
    response = {
        "id": "resp_" + _hex(),
        "created_at": int(time.time()),
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata"),
        "model": body.get("model") or fm.models[0],
        "object": "response",
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": chat_body["temperature"],
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p") if body.get("top_p") is not None else 1.0,
        "background": bool(body.get("background")),
        "max_output_tokens": body.get("max_output_tokens")
        or MAX_MODEL_LEN - usage["prompt_tokens"],
        "max_tool_calls": body.get("max_tool_calls"),
        "previous_response_id": previous_id,
        "prompt": None,
        "reasoning": body.get("reasoning"),
        "service_tier": body.get("service_tier") or "auto",
        "status": "incomplete" if cut else "completed",
        "text": body.get("text"),
        "top_logprobs": None,
        "truncation": body.get("truncation") or "disabled",
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {
                "reasoning_tokens": usage["completion_tokens_details"]["reasoning_tokens"]},
            "total_tokens": usage["total_tokens"],
        },
        "user": body.get("user"),
        "input_messages": None,
        "output_messages": None,
    }
    return response, conversation


# --------------------------------------------------------------------------- stream


def response_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The typed events of a stream whose final body is `response`, in order."""
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    start = {**response, "output": [], "status": "in_progress", "usage": None,
             "incomplete_details": None}
    emit("response.created", response=start)
    emit("response.in_progress", response=start)
    for index, item in enumerate(response["output"]):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "function_call":
            emit("response.output_item.added", output_index=index,
                 item={**item, "arguments": "", "status": "in_progress"})
            for piece in tokenize(item["arguments"]):
                emit("response.function_call_arguments.delta", **at, delta=piece)
            emit("response.function_call_arguments.done", **at, arguments=item["arguments"])
            emit("response.output_item.done", output_index=index, item=item)
            continue
        reasoning = item["type"] == "reasoning"
        emit("response.output_item.added", output_index=index,
             item={**item, "content": [] if not reasoning else None, "status": "in_progress"})
        for part_index, part in enumerate(item["content"]):
            at_part = {**at, "content_index": part_index}
            empty = {**part, "text": ""}
            if not reasoning:
                empty["logprobs"] = []
            emit("response.content_part.added", **at_part, part=empty)
            for piece in tokenize(part["text"]):
                if reasoning:
                    emit("response.reasoning_text.delta", **at_part, delta=piece)
                else:
                    emit("response.output_text.delta", **at_part, delta=piece, logprobs=[])
            if reasoning:
                emit("response.reasoning_text.done", **at_part, text=part["text"])
            else:
                emit("response.output_text.done", **at_part, text=part["text"], logprobs=[])
            emit("response.content_part.done", **at_part, part=part)
        done = {**item, "status": "completed"} if reasoning else item
        emit("response.output_item.done", output_index=index, item=done)
    emit("response.completed", response=response)
    return events


def frame(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


# --------------------------------------------------------------------------- routes


def routes(fm: FakeModel) -> list[Route]:
    """The Responses routes, sharing the fake model's state and wire log."""
    store: dict[str, dict[str, Any]] = {}

    async def create(request: Request) -> Response:
        path = request.url.path
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as e:
            bad = _error(f"invalid JSON body: {e}")
            fm.log({"path": path, "request": None, "status": 400,
                    "response": json.loads(bytes(bad.body))})
            return bad
        resp: JSONResponse | None = None
        try:
            out, conversation = build_response(fm, body, store)
        except NotFound as e:
            resp = _not_found(str(e))
        except KeyError as e:
            param = str(e).strip("'")
            resp = _error(f"1 validation error: field '{param}' is required", param=param)
        except (ValueError, TypeError) as e:
            resp = _error(str(e))
        if resp is not None:
            fm.log({"path": path, "request": body, "status": resp.status_code,
                    "response": json.loads(bytes(resp.body))})
            return resp
        if body.get("store", True) is not False:
            store[out["id"]] = {"messages": conversation, "response": out}
        if body.get("stream"):
            events = response_events(out)
            fm.log({"path": path, "request": body, "response": out, "chunks": events})

            async def gen() -> AsyncIterator[str]:
                for event in events:
                    yield frame(event)

            return StreamingResponse(gen(), media_type="text/event-stream")
        fm.log({"path": path, "request": body, "response": out})
        return JSONResponse(out)

    async def retrieve(request: Request) -> Response:
        response_id = request.path_params["response_id"]
        stored = store.get(response_id)
        resp = _not_found(response_id) if stored is None else JSONResponse(stored["response"])
        entry: dict[str, Any] = {"path": request.url.path, "method": "GET", "request": None,
                                 "response": json.loads(bytes(resp.body))}
        if stored is None:
            entry["status"] = 404
        fm.log(entry)
        return resp

    return [Route("/v1/responses", create, methods=["POST"]),
            Route("/v1/responses/{response_id}", retrieve, methods=["GET"])]

