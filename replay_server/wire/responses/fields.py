"""The Responses API request: which fields are the key, and the keyed input.

`FIELDS` classifies every request field with the same roles as `keys.FIELDS` (key, strict,
ignored); `keyed_input` is the part of a request that belongs in the replay key, and
`previous_of` the conversation a saved response continues (for `previous_response_id`).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..keys import IGNORED, KEY, STRICT, Field, drop_nulls, number, verbatim

RESPONSES = "responses"
KEY_VERSION = 1

# How a key field's value is normalised (see `keyed_input`).
INPUT, TOOLS, TEXT, API, VERBATIM_FORM, STRUCTURED = (
    "input", "tools", "text", "api", "verbatim", "structured")


def _f(name: str, role: str, types: str, reason: str, unset: tuple[Any, ...] = (),
       form: str = API) -> Field:
    return Field(name, role, (RESPONSES,), tuple(types.split("|")), reason, unset, form)


FIELDS: tuple[Field, ...] = (
    # --- what the model sees ---
    _f("input", KEY, "string|array", "the conversation the model continues", form=INPUT),
    _f("instructions", KEY, "string", "a system (developer) message put before the input",
       form=VERBATIM_FORM),
    _f("previous_response_id", KEY, "string", "the stored conversation (that request's "
       "input and its response's output) goes before the input: keyed by what it holds, "
       "never by the id (see `keyed_input`)"),
    _f("conversation", KEY, "string|object", "OpenAI: the items of a stored conversation "
       "go before the input; a replay cannot see them, so keyed by the id itself"),
    _f("prompt", KEY, "object", "OpenAI: a stored prompt template and its variables "
       "(vLLM rejects it)"),
    _f("tools", KEY, "array", "tool definitions are rendered into the prompt", unset=([],),
       form=TOOLS),
    _f("reasoning", KEY, "object", "`effort` is rendered into the prompt of reasoning models "
       "(gpt-oss, a chat-template kwarg in vLLM) or sets their budget; `summary` asks for "
       "summary items", unset=({},)),
    _f("truncation", KEY, "string", "`auto` drops the oldest items when the context "
       "overflows", unset=("disabled",)),
    _f("context_management", KEY, "array", "OpenAI: compaction rewrites the conversation the "
       "model sees", unset=([],), form=VERBATIM_FORM),
    _f("image", KEY, "object", "OpenAI: how images are compressed into the prompt"),
    _f("previous_input_messages", KEY, "array", "vLLM: the earlier conversation (Harmony "
       "messages) put before the input", form=VERBATIM_FORM),
    _f("previous_response", KEY, "object", "vLLM: a whole earlier response whose "
       "conversation goes before the input (stateless multi-turn)"),
    _f("mm_processor_kwargs", KEY, "object", "vLLM: how images or audio become prompt "
       "tokens", unset=({},), form=VERBATIM_FORM),
    # --- what the model may emit ---
    _f("tool_choice", KEY, "string|object", "forces, forbids or allows a tool call "
       "(dropped when no tools are given)"),
    _f("parallel_tool_calls", KEY, "boolean", "whether several tool calls may be emitted "
       "(dropped when no tools are given; true is the default)", unset=(True,)),
    _f("text", KEY, "object", "`format` constrains the answer to JSON or a schema "
       "(`{type: text}` is the default); `verbosity` tells how long to answer",
       unset=({},), form=TEXT),
    _f("structured_outputs", KEY, "object", "vLLM: constrains the answer to a schema, "
       "regex, choice or grammar", unset=({},), form=STRUCTURED),
    _f("logit_bias", KEY, "object", "vLLM: bans or favours tokens", unset=({},)),
    _f("moderation", KEY, "object", "OpenAI: a blocking policy replaces flagged answers"),
    _f("access_programs", KEY, "object", "OpenAI: which policy program answers"),
    # --- what the server returns for the same generation ---
    _f("include_stop_str_in_output", KEY, "boolean", "vLLM: the stop string is kept in the "
       "returned text", unset=(False,)),
    _f("skip_special_tokens", KEY, "boolean", "vLLM: special tokens are left out of the "
       "returned text", unset=(True,)),
    # --- how the model samples, where it stops, what else is returned: --strict ---
    _f("temperature", STRICT, "number", "sampling temperature"),
    _f("top_p", STRICT, "number", "nucleus sampling"),
    _f("top_k", STRICT, "integer", "vLLM: top-k sampling"),
    _f("seed", STRICT, "integer", "vLLM: the sampler's seed"),
    _f("stop", STRICT, "string|array", "vLLM: strings that end the answer"),
    _f("repetition_penalty", STRICT, "number", "vLLM: penalises repeated tokens"),
    _f("ignore_eos", STRICT, "boolean", "vLLM: keep going past the end-of-text token"),
    _f("max_output_tokens", STRICT, "integer", "where the answer is cut (reasoning "
       "included)"),
    _f("max_tool_calls", STRICT, "integer", "OpenAI: how many built-in tool calls are "
       "carried out"),
    _f("top_logprobs", STRICT, "integer", "how many alternatives each logprob lists"),
    _f("include", STRICT, "array", "extra data returned with the same generation "
       "(`message.output_text.logprobs`, `reasoning.encrypted_content`, ...)", unset=([],)),
    _f("vllm_xargs", STRICT, "object", "vLLM: arguments for sampling plugins"),
    _f("enable_response_messages", STRICT, "boolean", "vLLM: the raw prompt and output "
       "messages are returned too"),
    # --- transport and bookkeeping ---
    _f("model", IGNORED, "string", "selects the saved run (see --model-alias)"),
    _f("stream", IGNORED, "boolean", "transport: the same answer, streamed"),
    _f("stream_options", IGNORED, "object", "transport: stream obfuscation"),
    _f("background", IGNORED, "boolean", "transport: the same answer, fetched later with "
       "GET /v1/responses/{id}"),
    _f("background_options", IGNORED, "object", "OpenAI: how soon a background answer is "
       "due"),
    _f("store", IGNORED, "boolean", "bookkeeping: whether the server keeps the response "
       "for GET and previous_response_id"),
    _f("metadata", IGNORED, "object", "bookkeeping: tags stored with the response"),
    _f("user", IGNORED, "string", "bookkeeping: the end user's id"),
    _f("safety_identifier", IGNORED, "string", "bookkeeping: the end user's id"),
    _f("prompt_cache_key", IGNORED, "string", "transport: the provider's cache"),
    _f("prompt_cache_retention", IGNORED, "string", "transport: the provider's cache"),
    _f("prompt_cache_options", IGNORED, "object", "transport: the provider's cache"),
    _f("service_tier", IGNORED, "string", "transport: the provider's queue"),
    _f("request_id", IGNORED, "string", "vLLM: the response id to use"),
    _f("priority", IGNORED, "integer", "vLLM: scheduling priority"),
    _f("cache_salt", IGNORED, "string", "vLLM: prefix-cache isolation"),
    _f("kv_transfer_params", IGNORED, "object", "vLLM: disaggregated serving"),
)

FIELDS_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
_KEYED = {f.name: f for f in FIELDS if f.role == KEY
          and f.name not in ("input", "previous_response_id")}
_NOT_STRICT = frozenset(f.name for f in FIELDS if f.role != STRICT)
_NEEDS_TOOLS = ("tool_choice", "parallel_tool_calls")


class NeedsPrevious(ValueError):
    """The request continues a stored response (`previous_response_id`), and the caller
    did not say what that response's conversation was."""


def _content(content: Any) -> Any:
    """A message content; a list holding one text part (input or output text, no
    annotations or logprobs) is the same as its plain string."""
    if not isinstance(content, list):
        return content
    parts = [_part(p) for p in content]
    if (len(parts) == 1 and isinstance(parts[0], dict)
            and parts[0].get("type") in ("input_text", "output_text")
            and parts[0].keys() == {"type", "text"} and isinstance(parts[0]["text"], str)):
        return parts[0]["text"]
    return parts


def _part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    out = drop_nulls(part)
    if part.get("type") == "output_text":
        out = {k: v for k, v in out.items() if not (k in ("annotations", "logprobs")
                                                    and v == [])}
    return out


def input_items(value: Any) -> Any:
    """The request's `input` as a normalised item list (see `keyed_input`)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        return value
    return [_item(i) for i in value]


def _item(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    out = drop_nulls(item)
    if "type" not in out and "role" in out:
        out = {**out, "type": "message"}
    if out.get("type") == "message" and "content" in out:
        out = {**out, "content": _content(out["content"])}
    return out


def output_items(response: dict[str, Any]) -> list[Any]:
    """A response's output as a later turn's prompt holds it: normalised like input items,
    item `id`s left out (the model never sees them, and a replay may have answered the
    earlier turn with another instance's identical generation under other ids)."""
    out = []
    for item in response.get("output") or []:
        normal = _item(item)
        if isinstance(normal, dict):
            normal = {k: v for k, v in normal.items() if k != "id"}
        out.append(normal)
    return out


def previous_of(keyed: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """What `previous_response_id` pointing at `response` puts before a request's input:
    `keyed` (the `keyed_input` of the request that `response` answered, its own previous
    turns included) and the response's `output_items`. Instructions of that earlier
    request are kept although OpenAI does not carry them over: a different earlier turn
    is never the same conversation."""
    return {"request": keyed, "output": output_items(response)}


def _tools(tools: Any) -> Any:
    if not isinstance(tools, list):
        return tools
    out = []
    for tool in tools:
        if isinstance(tool, dict):
            tool = {k: v for k, v in tool.items() if v is not None}
            if "parameters" in tool:
                tool["parameters"] = verbatim(tool["parameters"])
        out.append(tool)
    return out


def _text(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = {k: v for k, v in value.items() if v is not None}
    fmt = out.get("format")
    if fmt == {"type": "text"}:
        del out["format"]
    elif isinstance(fmt, dict):
        fmt = {k: v for k, v in fmt.items() if v is not None}
        if "schema" in fmt:
            fmt["schema"] = verbatim(fmt["schema"])
        out["format"] = fmt
    return out


def _structured(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {k: verbatim(v) for k, v in value.items() if v is not None}


_FORMS: dict[str, Any] = {
    API: drop_nulls,
    TOOLS: _tools,
    TEXT: _text,
    VERBATIM_FORM: verbatim,
    STRUCTURED: _structured,
}


def keyed_input(request: dict[str, Any], previous: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """The keyed part of a Responses request, normalised.

    `{"v", "kind": "responses", "input": [items], "previous"?: {...}, <key fields>}` with
    the *key* fields of `FIELDS` the request sets. `previous` is required when the request
    has a `previous_response_id` (else `NeedsPrevious`): `previous_of(<keyed_input of the
    request that the id's response answered>, <that response>)`. The id itself is never
    keyed: it names what a server stored, and a replay serving an identical generation of
    another instance hands out another id for the same conversation.

    Normalised, and only this, each because the two forms are the same to the model:
    1. a string `input` is a list of one user message item holding that string: OpenAI
       documents a string input as a user text input, and vLLM turns both into the same
       `{"role": "user", "content": ...}` chat message;
    2. a message item without `type` has `"type": "message"` (the API's only value for it);
    3. a message `content` that is a list of one `input_text`/`output_text` part (with no
       annotations or logprobs) is that part's string, as `keys` does for chat text parts;
       `annotations: []` and `logprobs: []` on an `output_text` part (what clients echo
       back from an earlier response) mean none;
    4. null-valued fields of items, parts and API objects (vLLM's bodies, and clients
       echoing them, carry many nulls); never inside a verbatim value (a tool's
       `parameters`, a `text.format` schema, `structured_outputs`), whose key order is
       kept too, as in `keys`;
    5. a field set to the value that means "unset": `tools: []`, `text: {format: {type:
       text}}`, `reasoning: {}`, `truncation: "disabled"`, `parallel_tool_calls: true`;
       and `tool_choice` and `parallel_tool_calls` when no tools are given.
    Not normalised: item `id`s and `status`es in the input (vLLM continues an assistant
    message whose `status` is `in_progress`), `call_id`s (some chat templates render them),
    `instructions` vs a leading system/developer message (rendered differently by OpenAI),
    `input_text` vs `output_text` parts of more than one, and any text.
    """
    keyed: dict[str, Any] = {"v": KEY_VERSION, "kind": RESPONSES,
                             "input": input_items(request.get("input"))}
    if request.get("previous_response_id") is not None:
        if previous is None:
            raise NeedsPrevious("the request continues response "
                                f"{request['previous_response_id']!r}: its conversation is "
                                "needed for the key")
        keyed["previous"] = previous
    for name in request.keys() & _KEYED.keys():
        value = request[name]
        spec = _KEYED[name]
        if value is None:
            continue
        if value in spec.unset:
            continue
        value = _FORMS[spec.form](value)
        if value in spec.unset:
            continue
        keyed[name] = value
    if "tools" not in keyed:
        for name in _NEEDS_TOOLS:
            keyed.pop(name, None)
    return keyed


def sampling_params(request: dict[str, Any]) -> dict[str, Any]:
    """What `--strict` compares: every field the request sets (null, or its "unset" value
    such as `include: []`, means unset) that is neither keyed nor ignored, numbers
    normalised; fields the table does not know too."""
    return {k: number(v) for k, v in request.items()
            if k not in _NOT_STRICT and v is not None
            and not (k in FIELDS_BY_NAME and v in FIELDS_BY_NAME[k].unset)}


def markdown_table() -> str:
    """The README's table of Responses request fields, generated from FIELDS (and tested)."""
    rows = ["| field | role | why |", "| --- | --- | --- |"]
    rows += [f"| `{f.name}` | {f.role} | {f.reason}"
             + (f" (unset: `{orjson.dumps(f.unset[0]).decode()}`)" if f.unset else "") + " |"
             for f in FIELDS]
    return "\n".join(rows)
