"""Request -> canonical key. Every matching rule lives here, as pure functions.

The key is a 16-byte BLAKE2b hash of the canonical JSON (sorted keys, compact separators,
UTF-8 kept) of the endpoint kind and the prompt:

- chat: `messages`, plus `tools`, `tool_choice` and `response_format` when the request
  carries them, because they change what the model would say;
- completions: one `prompt` (a string, or a list of token ids: the two never match each
  other), plus `echo: true`, because echo changes the text returned.

Normalised, and only this (KEY_VERSION 1):
1. key order inside JSON objects;
2. `null`-valued fields, at any depth;
3. a message `content` given as a list holding one text part, vs the same plain string;
4. fields set to the value that means "nothing": `tools: []`, `response_format:
   {"type": "text"}`, `tool_choice` when no tools are given, `echo: false`.
Whitespace, case and anything else inside a text are never touched: exact means exact.

`model` is not in the key (it selects the saved run), nor are sampling parameters (strict
mode compares those separately, see `sampling_params`). This module must never depend on
the server, the index or the files: it is the contract, tested directly.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

KEY_VERSION = 1

CHAT = "chat"
COMPLETION = "completion"

# Parameters that change how the model samples but not what it was asked. Not part of the
# key; `--strict` compares them with the saved request. `n` is left out on purpose: the
# samples rules decide what an `n` means.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "best_of",
    "reasoning_effort",
)


def drop_nulls(value: Any) -> Any:
    """`value` with every null-valued object field removed, at any depth. A flat object
    with no null (the usual message) is returned as it is, not copied: this is on the
    request path."""
    if isinstance(value, dict):
        for v in value.values():
            if v is None or isinstance(v, dict | list):
                return {k: drop_nulls(v) for k, v in value.items() if v is not None}
        return value
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def _normalise_content(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    if (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], dict)
        and content[0].keys() == {"type", "text"}
        and content[0]["type"] == "text"
        and isinstance(content[0]["text"], str)
    ):
        return {**message, "content": content[0]["text"]}
    return message


def _message(message: Any) -> Any:
    # The usual message, only strings, is already normal: checked in one pass, not copied.
    if type(message) is dict:
        for value in message.values():
            if type(value) is not str:
                return _normalise_content(drop_nulls(message))
    return message


def chat_prompt(request: dict[str, Any]) -> dict[str, Any]:
    """The keyed part of a chat request, normalised."""
    messages = [_message(m) for m in request.get("messages") or ()]
    prompt: dict[str, Any] = {"v": KEY_VERSION, "kind": CHAT, "messages": messages}
    tools = request.get("tools")
    if tools:
        prompt["tools"] = drop_nulls(tools)
        tool_choice = request.get("tool_choice")
        if tool_choice is not None:
            prompt["tool_choice"] = drop_nulls(tool_choice)
    response_format = request.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        prompt["response_format"] = drop_nulls(response_format)
    return prompt


def completion_prompt(prompt: str | list[int], echo: Any = None) -> dict[str, Any]:
    """The keyed part of one completion prompt (a batch is keyed prompt by prompt)."""
    keyed: dict[str, Any] = {"v": KEY_VERSION, "kind": COMPLETION, "prompt": prompt}
    if echo is True:
        keyed["echo"] = True
    return keyed


def canonical(prompt: dict[str, Any]) -> bytes:
    """Canonical JSON: sorted keys, compact separators, UTF-8 kept."""
    return orjson.dumps(prompt, option=orjson.OPT_SORT_KEYS)


def digest(canonical_json: bytes) -> bytes:
    return hashlib.blake2b(canonical_json, digest_size=16).digest()


def key_of(prompt: dict[str, Any]) -> bytes:
    return digest(canonical(prompt))


def sampling_params(request: dict[str, Any]) -> dict[str, Any]:
    """The sampling parameters a request sets (null means unset), for strict mode."""
    return {f: request[f] for f in SAMPLING_FIELDS if request.get(f) is not None}
