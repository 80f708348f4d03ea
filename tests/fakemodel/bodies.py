"""Response bodies and SSE chunks of the fake model (vLLM 0.33 shapes); no HTTP here."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from typing import Any

from tests.fakemodel.behaviour import (
    SYSTEM_FINGERPRINT,
    TOOL_TRIGGER,
    FakeModel,
    _limit,
    _max_tokens,
    _stop_list,
    canonical,
    chat_answer,
    chat_logprobs,
    chat_prompt_tokens,
    completion_answer,
    count_tokens,
    find_question,
    logprob_block,
    message_text,
    tokenize,
)

# --------------------------------------------------------------------------- chat

# dspy's ChatAdapter ends its user message with "Respond with the corresponding output
# fields, starting with the field `[[ ## answer ## ]]`, ...".
DSPY_FIELD = re.compile(r"starting with the field `\[\[ ## (\w+) ## \]\]`")


def build_chat(fm: FakeModel, body: dict[str, Any]) -> dict[str, Any]:
    messages = body["messages"]
    tools = body.get("tools") or None
    key = canonical({"messages": messages, "tools": tools})
    n = int(body.get("n") or 1)
    temperature = float(body["temperature"] if body.get("temperature") is not None else 1.0)
    ks = fm.sample_indices(key, n, temperature)
    stop = _stop_list(body)
    max_tokens = _max_tokens(body)
    last = messages[-1] if messages else {}
    last_user: dict[str, Any] = next(
        (m for m in reversed(messages) if m.get("role") == "user"), {})
    choices = []
    completion_tokens = 0
    reasoning_tokens = 0
    for j, k in enumerate(ks):
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
        }
        if (
            tools
            and last.get("role") == "user"
            and TOOL_TRIGGER in message_text(last.get("content")).lower()
        ):
            q = find_question(message_text(last.get("content")))
            tool = next(
                (t for t in tools if t.get("function", {}).get("name") == "calculator"), tools[0]
            )
            fn = tool.get("function", {})
            props = (fn.get("parameters") or {}).get("properties") or {}
            args: dict[str, Any] = {}
            nums = [q[0], q[2]] if q else [0, 0]
            for pname, schema in props.items():
                if schema.get("type") in ("integer", "number"):
                    args[pname] = nums.pop(0) if nums else 0
                else:
                    args[pname] = (
                        f"{q[0]} {q[1]} {q[2]}" if q else message_text(last.get("content"))
                    )
            call_id = "chatcmpl-tool-" + hashlib.sha256(f"{key}|{k}".encode()).hexdigest()[:32]
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": fn.get("name"), "arguments": json.dumps(args)},
                }
            ]
            message["reasoning"] = None
            finish, stop_reason = "tool_calls", None
            completion_tokens += count_tokens(json.dumps(args)) + 2
        else:
            if last.get("role") == "tool":
                result = message_text(last.get("content")).strip()
                reasoning: str | None = f"The calculator says {result}."
                content = f"The answer is {result}."
            else:
                reasoning, content = chat_answer(key, k, message_text(last_user.get("content")))
                field = DSPY_FIELD.search(message_text(last_user.get("content")))
                if field:  # dspy's ChatAdapter asks for its field markers: follow them
                    content = f"[[ ## {field[1]} ## ]]\n{content}\n\n[[ ## completed ## ]]"
            reasoning, content_out, finish, stop_reason = _limit(
                reasoning, content, stop, max_tokens
            )
            message["content"] = content_out
            message["reasoning"] = reasoning
            r = count_tokens(reasoning)
            reasoning_tokens += r
            completion_tokens += r + count_tokens(content_out)
        choice = {
            "index": j,
            "message": message,
            "logprobs": chat_logprobs(message.get("content"), "", body.get("top_logprobs"))
            if body.get("logprobs")
            else None,
            "finish_reason": finish,
            "stop_reason": stop_reason,
            "token_ids": None,
            "routed_experts": None,
            "weight_versions": None,
        }
        choices.append(choice)
    prompt_tokens = chat_prompt_tokens(messages, tools)
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or fm.models[0],
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        },
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def chat_chunks(resp: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    base = {
        "id": resp["id"],
        "object": "chat.completion.chunk",
        "created": resp["created"],
        "model": resp["model"],
    }
    chunks: list[dict[str, Any]] = []
    for ch in resp["choices"]:
        i = ch["index"]
        msg = ch["message"]
        chunks.append(
            {
                **base,
                "choices": [
                    {
                        "index": i,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "prompt_token_ids": None,
                "prompt_text": None,
            }
        )
        if msg.get("reasoning"):
            for tok in tokenize(msg["reasoning"]):
                chunks.append(
                    {
                        **base,
                        "choices": [
                            {
                                "index": i,
                                "delta": {"reasoning": tok},
                                "logprobs": None,
                                "finish_reason": None,
                                "token_ids": None,
                            }
                        ],
                        "kv_transfer_params": None,
                    }
                )
        finish = {
            "finish_reason": ch["finish_reason"],
            "stop_reason": ch["stop_reason"],
            "token_ids": None,
            "weight_versions": None,
        }
        if msg.get("tool_calls"):
            # as vLLM: the call with its name first, then its arguments token by token
            for n, tc in enumerate(msg["tool_calls"]):
                args = tc["function"]["arguments"]
                head = {"index": n, **tc, "function": {**tc["function"], "arguments": ""}}
                deltas = [head] + [{"index": n, "function": {"arguments": tok}}
                                   for tok in tokenize(args)]
                for delta in deltas:
                    chunks.append(
                        {
                            **base,
                            "choices": [
                                {
                                    "index": i,
                                    "delta": {"tool_calls": [delta]},
                                    "logprobs": None,
                                    "finish_reason": None,
                                    "token_ids": None,
                                }
                            ],
                            "kv_transfer_params": None,
                        }
                    )
            chunks.append(
                {
                    **base,
                    "choices": [{"index": i, "delta": {}, "logprobs": None, **finish}],
                    "kv_transfer_params": None,
                }
            )
            continue
        toks = tokenize(msg.get("content") or "")
        for t_i, tok in enumerate(toks):
            last = t_i == len(toks) - 1
            c = {"index": i, "delta": {"content": tok}, "logprobs": None}
            c.update(finish if last else {"finish_reason": None, "token_ids": None})
            chunks.append({**base, "choices": [c], "kv_transfer_params": None})
        if not toks:
            chunks.append(
                {
                    **base,
                    "choices": [{"index": i, "delta": {"content": ""}, "logprobs": None, **finish}],
                    "kv_transfer_params": None,
                }
            )
    if include_usage:
        u = resp["usage"]
        chunks.append(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": u["prompt_tokens"],
                    "total_tokens": u["total_tokens"],
                    "completion_tokens": u["completion_tokens"],
                },
                "system_fingerprint": SYSTEM_FINGERPRINT,
            }
        )
    else:
        chunks[-1]["system_fingerprint"] = SYSTEM_FINGERPRINT
    return chunks


# --------------------------------------------------------------------------- completions


def _prompts(prompt: Any) -> list[str | list[int]]:
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list):
        if not prompt:
            raise ValueError("prompt must not be empty")
        if all(isinstance(x, int) for x in prompt):
            return [prompt]
        if all(isinstance(x, str) for x in prompt):
            return list(prompt)
        if all(isinstance(x, list) and all(isinstance(y, int) for y in x) for x in prompt):
            return list(prompt)
    raise ValueError(
        "prompt must be a string, a list of strings, a list of token ids "
        "or a list of lists of token ids"
    )


def build_completion(fm: FakeModel, body: dict[str, Any]) -> dict[str, Any]:
    prompts = _prompts(body.get("prompt"))
    n = int(body.get("n") or 1)
    temperature = float(body["temperature"] if body.get("temperature") is not None else 1.0)
    stop = _stop_list(body)
    max_tokens = _max_tokens(body)
    if max_tokens is None:
        max_tokens = 16  # the OpenAI completions default
    echo = bool(body.get("echo"))
    lp_k = body.get("logprobs")
    choices = []
    prompt_tokens = completion_tokens = 0
    for p_i, prompt in enumerate(prompts):
        if isinstance(prompt, list):
            ptoks = [fm.vocab.tok(t) for t in prompt]
            if fm.vocab.id_to_tok:
                ptoks = [t if i == 0 else " " + t for i, t in enumerate(ptoks)]
            ptext = "".join(ptoks)
        else:
            ptoks = tokenize(prompt)
            ptext = prompt
        prompt_tokens += len(ptoks)
        key = canonical(prompt)
        for j, k in enumerate(fm.sample_indices(key, n, temperature)):
            full = completion_answer(key, k, ptext)
            _r, text_out, finish, stop_reason = _limit(None, full, stop, max_tokens)
            text_out = text_out or ""
            gen_toks = tokenize(text_out)
            completion_tokens += len(gen_toks)
            logprobs = None
            if lp_k is not None:
                if echo:
                    logprobs = logprob_block(ptoks + gen_toks, "", int(lp_k))
                else:
                    logprobs = logprob_block(gen_toks, ptext, int(lp_k))
            choices.append(
                {
                    "index": p_i * n + j,
                    "text": (ptext + text_out) if echo else text_out,
                    "logprobs": logprobs,
                    "finish_reason": finish,
                    "stop_reason": stop_reason,
                    "token_ids": None,
                    "prompt_logprobs": None,
                    "prompt_token_ids": None,
                    "routed_experts": None,
                    "weight_versions": None,
                }
            )
    return {
        "id": "cmpl-" + uuid.uuid4().hex,
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model") or fm.models[0],
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        },
        "kv_transfer_params": None,
    }


def completion_chunks(resp: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    base = {
        "id": resp["id"],
        "object": "text_completion",
        "created": resp["created"],
        "model": resp["model"],
    }
    chunks: list[dict[str, Any]] = []
    for ch in resp["choices"]:
        toks = tokenize(ch["text"]) or [""]
        for t_i, tok in enumerate(toks):
            last = t_i == len(toks) - 1
            chunks.append(
                {
                    **base,
                    "choices": [
                        {
                            "index": ch["index"],
                            "text": tok,
                            "logprobs": None,
                            "finish_reason": ch["finish_reason"] if last else None,
                            "stop_reason": ch["stop_reason"] if last else None,
                            "token_ids": None,
                            "prompt_logprobs": None,
                            "prompt_token_ids": None,
                        }
                    ],
                }
            )
    if include_usage:
        u = resp["usage"]
        chunks.append(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": u["prompt_tokens"],
                    "total_tokens": u["total_tokens"],
                    "completion_tokens": u["completion_tokens"],
                },
                "system_fingerprint": SYSTEM_FINGERPRINT,
            }
        )
    return chunks
