"""The chat request (`/v1/chat/completions`): every field of the OpenAI API and of vLLM's
extras, classified (`keys.Field`), and the normal forms of chat's own objects.

Chat's own normal forms, besides the engine's (see `keys`): a message `content` given as a
list holding one text part is the same as that plain string; tool and function
definitions are API objects around a verbatim `parameters` schema; `tool_choice`,
`parallel_tool_calls` and `function_call` mean nothing when no tools (or legacy functions)
are given.
"""

from __future__ import annotations

from typing import Any

from .. import keys
from ..choices import fields as shared
from ..keys import IGNORED, KEY, STRICT, field, verbatim

KIND = "chat"


def _content(message: dict[str, Any]) -> Any:
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


def message(value: Any) -> Any:
    """One message: an API object, one text part its string. The usual message, only
    strings, is already normal: checked in one pass, not copied."""
    if type(value) is dict:
        for v in value.values():
            if type(v) is not str:
                normal = keys.api(value)
                return _content(normal) if isinstance(normal, dict) else normal
    return value


def messages(value: Any) -> Any:
    return [message(m) for m in value] if isinstance(value, list) else value


def definition(function: Any) -> Any:
    """A function definition: an API object around a verbatim `parameters` schema."""
    if not isinstance(function, dict):
        return function
    out = {k: v for k, v in function.items() if v is not None}
    if "parameters" in out:
        out["parameters"] = verbatim(out["parameters"])
    return out


def _tool(tool: Any) -> Any:
    if not isinstance(tool, dict):
        return tool
    out = {k: v for k, v in tool.items() if v is not None}
    if "function" in out:
        out["function"] = definition(out["function"])
    return out


def tools(value: Any) -> Any:
    return [_tool(t) for t in value] if isinstance(value, list) else value


def functions(value: Any) -> Any:
    return [definition(f) for f in value] if isinstance(value, list) else value


_TOOLS = ("tools", "functions")

FIELDS = (
    # --- what the model sees
    field("messages", KEY, "array", "the conversation the model continues", form=messages),
    field("tools", KEY, "array", "tool definitions are rendered into the prompt",
          unset=([],), form=tools),
    field("functions", KEY, "array", "legacy tool definitions, rendered into the prompt",
          unset=([],), form=functions),
    field("documents", KEY, "array", "vLLM: documents rendered into the prompt (RAG)",
          unset=([],), form=verbatim),
    field("chat_template", KEY, "string", "vLLM: the template that renders the prompt",
          form=verbatim),
    field("chat_template_kwargs", KEY, "object", "vLLM: template variables, e.g. "
          "enable_thinking", unset=({},), form=verbatim),
    field("add_generation_prompt", KEY, "boolean", "vLLM: whether the assistant turn is "
          "opened for the model", unset=(True,)),
    field("continue_final_message", KEY, "boolean", "vLLM: the model continues the last "
          "message instead of answering it", unset=(False,)),
    field("add_special_tokens", KEY, "boolean", "vLLM: special tokens (BOS) added to the "
          "prompt; off by default for chat", unset=(False,)),
    *shared.SEES,
    field("mm_processor_kwargs", KEY, "object", "vLLM: how images or audio are turned into "
          "prompt tokens", unset=({},), form=verbatim),
    field("media_io_kwargs", KEY, "object", "vLLM: how images, audio or video are loaded "
          "for the prompt", unset=({},), form=verbatim),
    field("web_search_options", KEY, "object", "search results are put in front of the "
          "model", form=verbatim),
    field("reasoning_effort", KEY, "string", "rendered into the prompt of reasoning models "
          "(gpt-oss), or sets their reasoning budget"),
    field("verbosity", KEY, "string", "tells the model how long to answer"),
    # --- what the model may emit
    field("tool_choice", KEY, "string|object", "forces, forbids or allows a tool call "
          "(dropped when no tools are given)", needs=_TOOLS),
    field("function_call", KEY, "string|object", "legacy tool_choice (dropped when no "
          "functions are given)", needs=_TOOLS),
    field("parallel_tool_calls", KEY, "boolean", "whether several tool calls may be emitted "
          "(dropped when no tools are given)", unset=(True,), needs=_TOOLS),
    *shared.EMITS,
    field("modalities", KEY, "array", "asks for audio as well as text"),
    field("audio", KEY, "object", "the voice and format of an audio answer"),
    # --- what the server returns for the same generation
    field("echo", KEY, "boolean", "vLLM: the last message, when it is the assistant's, is "
          "returned in front of the answer", unset=(False,)),
    field("include_reasoning", KEY, "boolean", "vLLM: whether the reasoning is returned "
          "(without it, structured outputs constrain the reasoning too)", unset=(True,)),
    *shared.RETURNS,
    # --- how the model samples, and where it stops: compared with --strict
    *shared.SAMPLING,
    field("max_completion_tokens", STRICT, "integer", "where the answer is cut"),
    field("logprobs", STRICT, "boolean", "whether token logprobs are returned"),
    field("top_logprobs", STRICT, "integer", "how many alternatives each logprob lists"),
    field("return_prompt_text", STRICT, "boolean", "vLLM: the rendered prompt is returned "
          "too"),
    # --- transport and bookkeeping
    *shared.TRANSPORT,
    field("safety_identifier", IGNORED, "string", "bookkeeping: the end user's id"),
    field("metadata", IGNORED, "object", "bookkeeping: tags stored with the request"),
    field("store", IGNORED, "boolean", "bookkeeping: whether the provider keeps it"),
    field("prompt_cache_key", IGNORED, "string", "transport: the provider's cache"),
    field("prediction", IGNORED, "object", "speeds up decoding; the answer is the same"),
)

TABLE = keys.Table(KIND, FIELDS, own=("messages",))
