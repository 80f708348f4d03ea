"""The Messages request (Anthropic's `/v1/messages`, and `/v1/messages/count_tokens`): every
field of the API, classified (`keys.Field`), and the normal forms of its own objects.

Its own normal forms, besides the engine's (see `keys`), each because the API treats the
two forms alike:
1. a message `content` (or the `system` prompt) that is a list of one `text` block with
   nothing else in it is that block's plain string;
2. null-valued fields of messages and blocks (clients echoing a response's blocks carry
   `citations: null`), never inside a verbatim value: a tool's `input_schema`, a
   `tool_use` block's `input` (the call the model wrote, key order included), an output
   schema;
3. `tools: []`, `stop_sequences: []`, `thinking: {"type": "disabled"}` and
   `tool_choice: {"type": "auto"}` (the API's default) are unset; `tool_choice` means
   nothing when no tools are given (neither `tools` nor `mcp_servers`).
Not normalised: `thinking` blocks and their `signature` (the client sends back what the
saved answer held), `cache_control` markers, block order, roles, and any text.

The `anthropic-beta` header switches features on (and so changes answers): it is keyed as
the request field `anthropic-beta` (`HEADERS`), its comma-separated names as a sorted list.
"""

from __future__ import annotations

from typing import Any

from .. import keys
from ..keys import IGNORED, KEY, STRICT, field, tool_list, verbatim

KIND = "messages"
COUNT_KIND = "count_tokens"

BETA = "anthropic-beta"
HEADERS = (BETA,)
"""The request headers that are request fields (keyed like the body's)."""

# A block's values kept exactly: what the model wrote, or a schema.
_VERBATIM = {"tool_use": "input", "server_tool_use": "input"}


def block(value: Any) -> Any:
    """One content block: an API object, a tool call's `input` verbatim."""
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    kept = _VERBATIM.get(kind) if isinstance(kind, str) else None
    if kept is not None and kept in value:
        out = keys.api({k: v for k, v in value.items() if k != kept})
        return {**out, kept: verbatim(value[kept])}
    out = keys.api(value)
    content = out.get("content")
    if out.get("type") == "tool_result" and isinstance(content, list):
        out = {**out, "content": text_or_blocks(content)}
    return out


def text_or_blocks(value: Any) -> Any:
    """A content (or system) value: a list of one plain text block is its string."""
    if not isinstance(value, list):
        return value
    blocks = [block(b) for b in value]
    if (len(blocks) == 1 and isinstance(blocks[0], dict)
            and blocks[0].keys() == {"type", "text"} and blocks[0]["type"] == "text"
            and isinstance(blocks[0]["text"], str)):
        return blocks[0]["text"]
    return blocks


def message(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = keys.api({k: v for k, v in value.items() if k != "content"})
    if "content" in value:
        out = {**out, "content": text_or_blocks(value["content"])}
    return out


def messages(value: Any) -> Any:
    return [message(m) for m in value] if isinstance(value, list) else value


def output_format(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = {k: v for k, v in value.items() if v is not None}
    if "schema" in out:
        out["schema"] = verbatim(out["schema"])
    return out


def output_config(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = {k: v for k, v in value.items() if v is not None}
    if isinstance(out.get("format"), dict):
        out["format"] = output_format(out["format"])
    return out


def betas(value: Any) -> Any:
    """The `anthropic-beta` header's names (comma-separated, or a list of such values) as
    a sorted list: their order means nothing."""
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in values):
        return value
    return sorted({name.strip() for v in values for name in v.split(",") if name.strip()})


# Every field that gives the model tools: `tool_choice` acts on any of them (an MCP
# server's tools are called as `mcp_tool_use` blocks, and `{"type": "any"}` forces one).
_TOOLS = ("tools", "mcp_servers")

# The fields of a Messages request that count_tokens takes too (its whole body).
PROMPT_FIELDS = (
    # --- what the model sees ---
    field("messages", KEY, "array", "the conversation the model continues", form=messages),
    field("system", KEY, "string|array", "the system prompt put before the conversation",
          form=text_or_blocks),
    field("tools", KEY, "array", "tool definitions are rendered into the prompt", unset=([],),
          form=tool_list("input_schema")),
    field("mcp_servers", KEY, "array", "MCP servers whose tools the model is given",
          unset=([],)),
    field("container", KEY, "string|object", "the code-execution container whose files the "
          "model sees"),
    field("context_management", KEY, "object", "edits (clearing old tool results) rewrite "
          "the conversation the model sees"),
    # --- what the model may emit ---
    field("tool_choice", KEY, "object", "forces, forbids or allows a tool call (dropped "
          "when neither `tools` nor `mcp_servers` gives tools; `auto` is the default)",
          unset=({"type": "auto"},), needs=_TOOLS),
    field("thinking", KEY, "object", "extended thinking on, and its budget: the model "
          "thinks before answering", unset=({"type": "disabled"},)),
    field("output_format", KEY, "object", "structured outputs: the answer follows a JSON "
          "schema", form=output_format),
    field("output_config", KEY, "object", "the answer's format (a JSON schema) and effort",
          unset=({},), form=output_config),
    field(BETA, KEY, "string|array", "the `anthropic-beta` header (keyed as this field): "
          "beta features change what the model sees or emits", form=betas),
    # --- transport and bookkeeping ---
    field("model", IGNORED, "string", "selects the saved run (see --model-alias)"),
)

FIELDS = (
    *PROMPT_FIELDS,
    field("stop_sequences", KEY, "array", "strings that end the answer (Anthropic treats "
          "them as part of what is asked)", unset=([],), items="string"),
    # --- how the model samples and where it stops: --strict ---
    field("max_tokens", STRICT, "integer", "where the answer is cut (thinking included)"),
    field("temperature", STRICT, "number", "sampling temperature"),
    field("top_p", STRICT, "number", "nucleus sampling"),
    field("top_k", STRICT, "integer", "top-k sampling"),
    # --- transport and bookkeeping ---
    field("stream", IGNORED, "boolean", "transport: the same answer, streamed"),
    field("metadata", IGNORED, "object", "bookkeeping: the end user's id"),
    field("anthropic-version", IGNORED, "string", "transport: the API version header "
          "(the wire format, not the answer)"),
    field("service_tier", IGNORED, "string", "transport: the provider's queue"),
    field("inference_geo", IGNORED, "string", "transport: where the request is served"),
)

TABLE = keys.Table(KIND, FIELDS, own=("messages",))
COUNT_TABLE = keys.Table(COUNT_KIND, PROMPT_FIELDS, own=("messages",))
