"""Gemini's request and answer shapes for the fake model (Google's generateContent API), as
pure functions of JSON; the HTTP is in gemini_api.py.

A GenerateContentRequest becomes a chat request answered by the chat behaviour
(`bodies.build_chat`), so every API of the fake gives the same answer for the same
conversation: `systemInstruction` -> a leading system message; each content's text parts ->
its text (role `model` -> assistant; thought parts left out, as the API leaves out earlier
turns' thoughts); `functionCall` parts -> assistant `tool_calls`, `functionResponse` parts
-> `tool` messages; `tools[].functionDeclarations` -> chat tools (`toolConfig`'s mode NONE
hides them); `generationConfig`'s `temperature` and `candidateCount` pass through. The API
accepts camelCase and snake_case spellings of a field: so does the fake (`field`).

The answer is Google's: per candidate, a thought part (`{"text", "thought": true}`, the
chat answer's reasoning or a fixed thought) when thinking is on (a `thinkingConfig` without
a 0 budget) and `includeThoughts` asks for it, then a text part or `functionCall` parts; when
thinking is on, the text part (or the first function call) carries the thoughts'
`thoughtSignature`, which the client sends back next turn, as Gemini does; the text is JSON
when `responseMimeType` is `application/json` (filled in from `responseSchema`).
`stopSequences` then `maxOutputTokens` (which counts the thoughts, as Gemini's does) cut it
(`finishReason` STOP or MAX_TOKENS); `usageMetadata` counts the prompt, the candidates and
the thoughts. A thought signature is base64 of bytes the fake can recognise when a client
sends it back (`signature_ok`), whatever base64 alphabet the client re-encodes it in.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from typing import Any

from tests.fakemodel.behaviour import (
    FakeModel,
    _limit,
    chat_prompt_tokens,
    count_tokens,
    tokenize,
)
from tests.fakemodel.bodies import build_chat

THOUGHT = "I work it out step by step."
SIGNATURE_PREFIX = b"fakemodel-thought-signature:"
CHUNK_TOKENS = 3  # Gemini streams a few tokens per chunk, not one
SAFETY = [{"category": f"HARM_CATEGORY_{c}", "probability": "NEGLIGIBLE"}
          for c in ("HATE_SPEECH", "DANGEROUS_CONTENT", "HARASSMENT", "SEXUALLY_EXPLICIT")]


def field(obj: Any, camel: str) -> Any:
    """`obj`'s field spelled `camel` or in snake_case (the API reads both)."""
    if not isinstance(obj, dict):
        return None
    if camel in obj:
        return obj[camel]
    return obj.get(re.sub(r"([A-Z])", lambda m: "_" + m[1].lower(), camel))


# --------------------------------------------------------------------------- request


def _parts(content: Any) -> list[dict[str, Any]]:
    parts = field(content, "parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise ValueError("content.parts: expected a list of parts")
    return parts


def _text(parts: list[dict[str, Any]]) -> str:
    return "".join(p["text"] for p in parts if isinstance(p.get("text"), str)
                   and not p.get("thought"))


def _result(response: Any) -> str:
    """A function response as the text of a tool message: its one value, else its JSON."""
    if isinstance(response, dict) and len(response) == 1:
        (value,) = response.values()
        return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(response)


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation of a GenerateContentRequest as chat messages."""
    contents = field(body, "contents")
    if not isinstance(contents, list) or not contents:
        raise ValueError("* GenerateContentRequest.contents: contents is not specified")
    out: list[dict[str, Any]] = []
    system = field(body, "systemInstruction")
    if system:
        out.append({"role": "system",
                    "content": system if isinstance(system, str) else _text(_parts(system))})
    for content in contents:
        parts = _parts(content)
        for part in parts:
            if (response := field(part, "functionResponse")) is not None:
                out.append({"role": "tool", "tool_call_id": response.get("id"),
                            "content": _result(response.get("response"))})
        calls = [{"id": call.get("id") or call.get("name"), "type": "function", "function": {
            "name": call.get("name"), "arguments": json.dumps(call.get("args") or {})}}
            for part in parts if (call := field(part, "functionCall")) is not None]
        text = _text(parts)
        if text or calls or len(out) == 0 or out[-1]["role"] != "tool":
            role = "assistant" if content.get("role") == "model" else "user"
            message: dict[str, Any] = {"role": role, "content": text}
            if calls:
                message["tool_calls"] = calls
            out.append(message)
    return out


def _lower_types(schema: Any) -> Any:
    """A Gemini schema (types spelled STRING, INTEGER, ...) in JSON Schema's spelling."""
    if isinstance(schema, dict):
        return {k: v.lower() if k == "type" and isinstance(v, str) else _lower_types(v)
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [_lower_types(s) for s in schema]
    return schema


def chat_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The function declarations of `tools` as chat tools (none when toolConfig says NONE)."""
    mode = field(field(field(body, "toolConfig"), "functionCallingConfig"), "mode")
    if mode == "NONE":
        return []
    return [{"type": "function", "function": {
        "name": d.get("name"), "description": d.get("description"),
        "parameters": _lower_types(field(d, "parameters") or field(d, "parametersJsonSchema"))}}
        for tool in field(body, "tools") or []
        for d in field(tool, "functionDeclarations") or []]


def prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt's tokens, as generateContent's usage and countTokens count them."""
    return chat_prompt_tokens(chat_messages(body), chat_tools(body) or None)


# --------------------------------------------------------------------------- answer


def signature(response_id: str) -> str:
    """A thought signature: base64 (standard alphabet, as Google's) of recognisable bytes."""
    return base64.b64encode(SIGNATURE_PREFIX + hashlib.sha256(
        response_id.encode()).digest()).decode()


def signature_ok(value: Any) -> bool:
    """Whether a signature a client sent back is one the fake gave (in either alphabet)."""
    try:
        raw = base64.b64decode(str(value).replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return False
    return raw.startswith(SIGNATURE_PREFIX)


def _filled(schema: Any, text: str) -> Any:
    """A value of `schema` made of the answer `text` (numbers: the last number in it)."""
    schema = schema if isinstance(schema, dict) else {}
    kind = str(schema.get("type") or "object").lower()
    numbers = re.findall(r"-?\d+", text)
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        properties = schema.get("properties") or {"answer": {"type": "string"}}
        return {name: _filled(sub, text) for name, sub in properties.items()}
    if kind in ("integer", "number"):
        return int(numbers[-1]) if numbers else 0
    if kind == "boolean":
        return True
    if kind == "array":
        return [_filled(schema.get("items"), text)]
    return text


def json_text(text: str, config: dict[str, Any]) -> str:
    """JSON mode's text: the answer as is when it is JSON already (a judge's), else filled
    into `responseSchema` (or `responseJsonSchema`; without either, `{"answer": text}`)."""
    try:
        json.loads(text)
        return text
    except ValueError:
        schema = field(config, "responseSchema") or field(config, "responseJsonSchema")
        return json.dumps(_filled(schema, text))


def _thinking(config: dict[str, Any]) -> tuple[bool, bool]:
    """(thinking on, thoughts shown): on when thinkingConfig is given without a 0 budget."""
    thinking = field(config, "thinkingConfig")
    if not isinstance(thinking, dict):
        return False, False
    on = field(thinking, "thinkingBudget") != 0
    return on, on and bool(field(thinking, "includeThoughts"))


def _said(message: dict[str, Any], config: dict[str, Any], thought: str | None) -> tuple[
        list[dict[str, Any]], str | None, str]:
    """The answer's parts (function calls, or the text as `stopSequences` then
    `maxOutputTokens` cut it), the thought as cut, and the finishReason."""
    if message.get("tool_calls"):
        return [{"functionCall": {"name": c["function"]["name"],
                                  "args": json.loads(c["function"]["arguments"])}}
                for c in message["tool_calls"]], thought, "STOP"
    text = message.get("content") or ""
    if field(config, "responseMimeType") == "application/json":
        text = json_text(text, config)
    thought, cut, reason, _ = _limit(thought, text, field(config, "stopSequences") or [],
                                     field(config, "maxOutputTokens"))
    return [{"text": cut}] if cut else [], thought, "MAX_TOKENS" if reason == "length" else "STOP"


def _tokens(part: dict[str, Any]) -> int:
    return count_tokens(part["text"] if "text" in part else json.dumps(part["functionCall"]))


def _candidate(choice: dict[str, Any], config: dict[str, Any], rid: str) -> tuple[
        dict[str, Any], int, int]:
    """One candidate of the chat choice, with its (answer, thought) token counts."""
    message = choice["message"]
    on, shown = _thinking(config)
    said, thought, finish = _said(message, config,
                                  (message.get("reasoning") or THOUGHT) if on else None)
    if on and said:  # the part after the thoughts carries their signature, as Gemini's
        said[0]["thoughtSignature"] = signature(rid)
    parts = [{"text": thought, "thought": True}] if thought and shown else []
    content: dict[str, Any] = {"parts": parts + said, "role": "model"}
    if not content["parts"]:
        del content["parts"]  # (as the API sends a candidate cut before any answer)
    return ({"content": content, "finishReason": finish, "index": choice["index"],
             "safetyRatings": SAFETY}, sum(_tokens(p) for p in said), count_tokens(thought))


def build_response(fm: FakeModel, body: dict[str, Any], model: str,
                   vertex: bool = False) -> dict[str, Any]:
    """The GenerateContentResponse of a request for `model` (Vertex AI's adds createTime)."""
    config = field(body, "generationConfig") or {}
    if not isinstance(config, dict):
        raise ValueError("generationConfig: expected an object")
    chat_body: dict[str, Any] = {"model": model, "messages": chat_messages(body),
                                 "n": field(config, "candidateCount") or 1,
                                 "temperature": field(config, "temperature")}
    if tools := chat_tools(body):
        chat_body["tools"] = tools
    chat = build_chat(fm, chat_body)
    rid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    candidates, answers, thoughts = [], 0, 0
    for choice in chat["choices"]:
        candidate, answer, thought = _candidate(choice, config, rid)
        candidates.append(candidate)
        answers, thoughts = answers + answer, thoughts + thought
    prompt = chat["usage"]["prompt_tokens"]
    usage: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": answers,
                             "totalTokenCount": prompt + answers + thoughts,
                             "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    if not answers:
        del usage["candidatesTokenCount"]  # (proto3 JSON leaves a 0 out)
    out: dict[str, Any] = {"candidates": candidates, "usageMetadata": usage, "modelVersion": model,
           "responseId": rid}
    if vertex:
        out["createTime"] = "2025-01-01T00:00:00.000000Z"
    return out


def chunks(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream of `response`: each chunk a whole GenerateContentResponse with a few
    tokens of one part (a function call whole; a signature on the last piece of its part),
    each candidate's `finishReason` on its last chunk, `usageMetadata` on the last one."""
    head = {k: v for k, v in response.items() if k not in ("candidates", "usageMetadata")}
    out: list[dict[str, Any]] = []
    for candidate in response["candidates"]:
        pieces: list[dict[str, Any]] = []
        for part in candidate["content"].get("parts", []):
            if "text" not in part:
                pieces.append(part)
                continue
            tokens = tokenize(part["text"]) or [""]
            texts = ["".join(tokens[i:i + CHUNK_TOKENS])
                     for i in range(0, len(tokens), CHUNK_TOKENS)]
            pieces += [{**part, "text": t} for t in texts]
            for piece in pieces[-len(texts):-1]:
                piece.pop("thoughtSignature", None)
        cut = [{"content": {"parts": [p], "role": "model"}, "index": candidate["index"]}
               for p in pieces] or [{"content": {"role": "model"}, "index": candidate["index"]}]
        cut[-1].update(finishReason=candidate["finishReason"],
                       safetyRatings=candidate["safetyRatings"])
        out += [{"candidates": [c], **head} for c in cut]
    out[-1]["usageMetadata"] = response["usageMetadata"]
    return out


def token_count(body: dict[str, Any]) -> dict[str, Any]:
    """countTokens' answer, for `contents` or a whole `generateContentRequest`."""
    request = field(body, "generateContentRequest") or body
    tokens = prompt_tokens(request)
    return {"totalTokens": tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens}]}
