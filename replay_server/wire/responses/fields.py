"""The Responses API request (`/v1/responses`): every field of openai-python's
`responses.create` and of vLLM's extras, classified (`keys.Field`), and the normal forms of
its own objects (input items, tools, `text`).

Its own normal forms, besides the engine's (see `keys`), each because the two forms are
the same to the model:
1. a string `input` is a list of one user message item holding that string: OpenAI
   documents a string input as a user text input, and vLLM turns both into the same
   `{"role": "user", "content": ...}` chat message;
2. a message item without `type` has `"type": "message"` (the API's only value for it);
3. a message `content` that is a list of one `input_text`/`output_text` part (with no
   annotations or logprobs) is that part's string, as chat does for text parts;
   `annotations: []` and `logprobs: []` on an `output_text` part (what clients echo back
   from an earlier response) mean none;
4. null-valued fields of items and parts (vLLM's bodies, and clients echoing them, carry
   many nulls); never inside a verbatim value (a tool's `parameters`, a `text.format`
   schema, `structured_outputs`), whose key order is kept too;
5. `text: {format: {type: text}}` is unset, as are `tools: []`, `reasoning: {}`,
   `truncation: "disabled"`, `parallel_tool_calls: true`; `tool_choice` and
   `parallel_tool_calls` mean nothing when no tools are given (neither `tools` nor a
   stored `prompt`, which may carry tools).
Not normalised: item `id`s and `status`es in the input (vLLM continues an assistant message
whose `status` is `in_progress`), `call_id`s (some chat templates render them),
`instructions` vs a leading system/developer message (rendered differently by OpenAI),
`input_text` vs `output_text` parts of more than one, and any text.
"""

from __future__ import annotations

from typing import Any

from .. import keys
from ..keys import IGNORED, KEY, STRICT, field, structured, tool_list, verbatim

KIND = "responses"


def _part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    out = keys.api(part)
    if part.get("type") == "output_text":
        out = {k: v for k, v in out.items() if not (k in ("annotations", "logprobs")
                                                    and v == [])}
    return out


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


def item(value: Any) -> Any:
    """One input (or output) item, normalised."""
    if not isinstance(value, dict):
        return value
    out = keys.api(value)
    if "type" not in out and "role" in out:
        out = {**out, "type": "message"}
    if out.get("type") == "message" and "content" in out:
        out = {**out, "content": _content(out["content"])}
    return out


def input_items(value: Any) -> Any:
    """The request's `input` as a normalised item list."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        return value
    return [item(i) for i in value]


def text(value: Any) -> Any:
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


# Every field that gives the model tools: a stored prompt template (`prompt`) can carry
# tools of its own, which `tool_choice` and `parallel_tool_calls` then act on.
_TOOLS = ("tools", "prompt")

FIELDS = (
    # --- what the model sees ---
    field("input", KEY, "string|array", "the conversation the model continues", form=input_items),
    field("instructions", KEY, "string", "a system (developer) message put before the input",
          form=verbatim),
    field("previous_response_id", KEY, "string", "the stored conversation (that request's "
          "input and its response's output) goes before the input: keyed by what it holds, "
          "never by the id (see `keyed_input`)"),
    field("conversation", KEY, "string|object", "OpenAI: the items of a stored conversation "
          "go before the input; a replay cannot see them, so keyed by the id itself"),
    field("prompt", KEY, "object", "OpenAI: a stored prompt template and its variables "
          "(vLLM rejects it)"),
    field("tools", KEY, "array", "tool definitions are rendered into the prompt", unset=([],),
          form=tool_list("parameters")),
    field("reasoning", KEY, "object", "`effort` is rendered into the prompt of reasoning models "
          "(gpt-oss, a chat-template kwarg in vLLM) or sets their budget; `summary` asks for "
          "summary items", unset=({},)),
    field("truncation", KEY, "string", "`auto` drops the oldest items when the context "
          "overflows", unset=("disabled",)),
    field("context_management", KEY, "array", "OpenAI: compaction rewrites the conversation the "
          "model sees", unset=([],), form=verbatim),
    field("image", KEY, "object", "OpenAI: how images are compressed into the prompt"),
    field("previous_input_messages", KEY, "array", "vLLM: the earlier conversation (Harmony "
          "messages) put before the input", form=verbatim),
    field("previous_response", KEY, "object", "vLLM: a whole earlier response whose "
          "conversation goes before the input (stateless multi-turn)"),
    field("mm_processor_kwargs", KEY, "object", "vLLM: how images or audio become prompt "
          "tokens", unset=({},), form=verbatim),
    # --- what the model may emit ---
    field("tool_choice", KEY, "string|object", "forces, forbids or allows a tool call "
          "(dropped when neither `tools` nor a stored `prompt` gives tools)", needs=_TOOLS),
    field("parallel_tool_calls", KEY, "boolean", "whether several tool calls may be emitted "
          "(dropped when neither `tools` nor a stored `prompt` gives tools; true is the "
          "default)", unset=(True,), needs=_TOOLS),
    field("text", KEY, "object", "`format` constrains the answer to JSON or a schema "
          "(`{type: text}` is the default); `verbosity` tells how long to answer",
          unset=({},), form=text),
    field("structured_outputs", KEY, "object", "vLLM: constrains the answer to a schema, "
          "regex, choice or grammar", unset=({},), form=structured),
    field("logit_bias", KEY, "object", "vLLM: bans or favours tokens", unset=({},)),
    field("moderation", KEY, "object", "OpenAI: a blocking policy replaces flagged answers"),
    field("access_programs", KEY, "object", "OpenAI: which policy program answers"),
    # --- what the server returns for the same generation ---
    field("include_stop_str_in_output", KEY, "boolean", "vLLM: the stop string is kept in the "
          "returned text", unset=(False,)),
    field("skip_special_tokens", KEY, "boolean", "vLLM: special tokens are left out of the "
          "returned text", unset=(True,)),
    # --- how the model samples, where it stops, what else is returned: --strict ---
    field("temperature", STRICT, "number", "sampling temperature"),
    field("top_p", STRICT, "number", "nucleus sampling"),
    field("top_k", STRICT, "integer", "vLLM: top-k sampling"),
    field("seed", STRICT, "integer", "vLLM: the sampler's seed"),
    field("stop", STRICT, "string|array", "vLLM: strings that end the answer", items="string"),
    field("repetition_penalty", STRICT, "number", "vLLM: penalises repeated tokens"),
    field("ignore_eos", STRICT, "boolean", "vLLM: keep going past the end-of-text token"),
    field("max_output_tokens", STRICT, "integer", "where the answer is cut (reasoning "
          "included)"),
    field("max_tool_calls", STRICT, "integer", "OpenAI: how many built-in tool calls are "
          "carried out"),
    field("top_logprobs", STRICT, "integer", "how many alternatives each logprob lists"),
    field("include", STRICT, "array", "extra data returned with the same generation "
          "(`message.output_text.logprobs`, `reasoning.encrypted_content`, ...)", unset=([],)),
    field("vllm_xargs", STRICT, "object", "vLLM: arguments for sampling plugins"),
    field("enable_response_messages", STRICT, "boolean", "vLLM: the raw prompt and output "
          "messages are returned too"),
    # --- transport and bookkeeping ---
    field("model", IGNORED, "string", "selects the saved run (see --model-alias)"),
    field("stream", IGNORED, "boolean", "transport: the same answer, streamed"),
    field("stream_options", IGNORED, "object", "transport: stream obfuscation"),
    field("background", IGNORED, "boolean", "transport: the same answer, fetched later with "
          "GET /v1/responses/{id}"),
    field("background_options", IGNORED, "object", "OpenAI: how soon a background answer is "
          "due"),
    field("store", IGNORED, "boolean", "bookkeeping: whether the server keeps the response "
          "for GET and previous_response_id"),
    field("metadata", IGNORED, "object", "bookkeeping: tags stored with the response"),
    field("user", IGNORED, "string", "bookkeeping: the end user's id"),
    field("safety_identifier", IGNORED, "string", "bookkeeping: the end user's id"),
    field("prompt_cache_key", IGNORED, "string", "transport: the provider's cache"),
    field("prompt_cache_retention", IGNORED, "string", "transport: the provider's cache"),
    field("prompt_cache_options", IGNORED, "object", "transport: the provider's cache"),
    field("service_tier", IGNORED, "string", "transport: the provider's queue"),
    field("request_id", IGNORED, "string", "vLLM: the response id to use"),
    field("priority", IGNORED, "integer", "vLLM: scheduling priority"),
    field("cache_salt", IGNORED, "string", "vLLM: prefix-cache isolation"),
    field("kv_transfer_params", IGNORED, "object", "vLLM: disaggregated serving"),
)


# a continuation is keyed by the conversation it continues, as `previous`
TABLE = keys.Table(KIND, FIELDS, own=("input", "previous_response_id"),
                   aliases={"previous": "previous_response_id"})
