"""Request -> canonical key. Every matching rule lives here, as pure functions.

`FIELDS` classifies every request field of the OpenAI chat and completions APIs and of
vLLM's extra parameters, with its reason:

- *key*: it changes what the model sees (the prompt, tools, templates) or what it may emit
  (formats, grammars, banned or biased tokens), so it is part of the key: a request that
  differs in it never gets the saved answer;
- *strict*: it changes how the model samples or where it stops (temperature, max_tokens,
  stop, seed, ...). Not part of the key; `--strict` requires it to equal the saved value;
- *ignored*: transport and bookkeeping (`stream`, `user`, `metadata`, ...), or `model`
  and `n`, which select the saved run and the samples.

A field the table does not know is treated as *strict*: `--strict` compares it.

The key is 16 bytes of the SHA-256 of the canonical JSON (sorted keys, compact separators,
UTF-8 kept) of the endpoint kind and the *key* fields the request sets. Normalised, and
only this (KEY_VERSION 2):
1. key order inside JSON objects, except inside a JSON Schema or other verbatim value
   (a tool's `parameters`, a `response_format` schema, `guided_json`, the template's
   kwargs and documents): there key order is rendered into the prompt or followed by the
   grammar, so it is content, like everything else inside such a value;
2. `null`-valued fields where null means "unset" in the API: top-level fields, message
   fields (and their content parts and tool calls), tool and function definitions, the
   `response_format` envelope. Never inside a verbatim value: `{"const": null}` is not `{}`;
3. a message `content` given as a list holding one text part, vs the same plain string;
4. a field set to the value that means "unset" (`FIELDS[...].unset`), e.g. `tools: []`,
   `response_format: {"type": "text"}`, `echo: false`, `add_generation_prompt: true`; and
   `tool_choice`, `parallel_tool_calls`, `function_call` when no tools are given.
Whitespace, case and anything else inside a text are never touched: exact means exact.

This module must never depend on the server, the index or the files: it is the contract,
tested directly.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

KEY_VERSION = 2

CHAT = "chat"
COMPLETION = "completion"
BOTH = (CHAT, COMPLETION)

KEY, STRICT, IGNORED = "key", "strict", "ignored"

# How a key field's value is normalised: an API object (nulls dropped, key order free), a
# message list, tool or function definitions (API objects around a verbatim JSON Schema),
# a response_format, or verbatim (nothing normalised but the top-level null).
API, MESSAGES, TOOLS, FUNCTIONS, FORMAT, STRUCTURED, VERBATIM = (
    "api", "messages", "tools", "functions", "format", "structured", "verbatim")


@dataclass(frozen=True)
class Field:
    name: str
    role: str
    kinds: tuple[str, ...]
    types: tuple[str, ...]  # JSON types accepted (checked by `protocol`, documented in OpenAPI)
    reason: str
    unset: tuple[Any, ...] = ()  # values that mean the same as leaving the field out
    form: str = API


def _f(name: str, role: str, kinds: str | tuple[str, ...], types: str, reason: str,
       unset: tuple[Any, ...] = (), form: str = API) -> Field:
    return Field(name, role, (kinds,) if isinstance(kinds, str) else kinds,
                 tuple(types.split("|")), reason, unset, form)


FIELDS: tuple[Field, ...] = (
    # --- what the model sees ---
    _f("messages", KEY, CHAT, "array", "the conversation the model continues", form=MESSAGES),
    _f("prompt", KEY, COMPLETION, "string|array", "the text or token ids the model continues "
       "(a batch is keyed prompt by prompt)", form=VERBATIM),
    _f("suffix", KEY, COMPLETION, "string", "the text after the insertion point "
       "(fill-in-the-middle)", form=VERBATIM),
    _f("echo", KEY, COMPLETION, "boolean", "the prompt is returned in front of the answer",
       unset=(False,)),
    _f("tools", KEY, CHAT, "array", "tool definitions are rendered into the prompt",
       unset=([],), form=TOOLS),
    _f("functions", KEY, CHAT, "array", "legacy tool definitions, rendered into the prompt",
       unset=([],), form=FUNCTIONS),
    _f("documents", KEY, CHAT, "array", "vLLM: documents rendered into the prompt (RAG)",
       unset=([],), form=VERBATIM),
    _f("chat_template", KEY, CHAT, "string", "vLLM: the template that renders the prompt",
       form=VERBATIM),
    _f("chat_template_kwargs", KEY, CHAT, "object", "vLLM: template variables, e.g. "
       "enable_thinking", unset=({},), form=VERBATIM),
    _f("add_generation_prompt", KEY, CHAT, "boolean", "vLLM: whether the assistant turn is "
       "opened for the model", unset=(True,)),
    _f("continue_final_message", KEY, CHAT, "boolean", "vLLM: the model continues the last "
       "message instead of answering it", unset=(False,)),
    _f("add_special_tokens", KEY, CHAT, "boolean", "vLLM: special tokens (BOS) added to the "
       "prompt; off by default for chat", unset=(False,)),
    _f("add_special_tokens", KEY, COMPLETION, "boolean", "vLLM: special tokens (BOS) added to "
       "the prompt; on by default for completions", unset=(True,)),
    _f("truncate_prompt_tokens", KEY, BOTH, "integer", "vLLM: cuts the prompt the model sees"),
    _f("mm_processor_kwargs", KEY, CHAT, "object", "vLLM: how images or audio are turned "
       "into prompt tokens", unset=({},), form=VERBATIM),
    _f("prompt_embeds", KEY, COMPLETION, "string|array", "vLLM: the prompt as embeddings",
       form=VERBATIM),
    _f("web_search_options", KEY, CHAT, "object", "search results are put in front of the "
       "model", form=VERBATIM),
    _f("reasoning_effort", KEY, CHAT, "string", "rendered into the prompt of reasoning "
       "models (gpt-oss), or sets their reasoning budget"),
    _f("verbosity", KEY, CHAT, "string", "tells the model how long to answer"),
    # --- what the model may emit ---
    _f("tool_choice", KEY, CHAT, "string|object", "forces, forbids or allows a tool call "
       "(dropped when no tools are given)"),
    _f("function_call", KEY, CHAT, "string|object", "legacy tool_choice (dropped when no "
       "functions are given)"),
    _f("parallel_tool_calls", KEY, CHAT, "boolean", "whether several tool calls may be "
       "emitted (dropped when no tools are given)", unset=(True,)),
    _f("response_format", KEY, BOTH, "object", "constrains the answer to JSON or a schema",
       unset=({"type": "text"},), form=FORMAT),
    _f("structured_outputs", KEY, BOTH, "object", "vLLM: constrains the answer to a schema, "
       "regex, choice or grammar", unset=({},), form=STRUCTURED),
    _f("guided_json", KEY, BOTH, "string|object", "vLLM: constrains the answer to a JSON "
       "Schema", form=VERBATIM),
    _f("guided_regex", KEY, BOTH, "string", "vLLM: constrains the answer to a regex",
       form=VERBATIM),
    _f("guided_choice", KEY, BOTH, "array", "vLLM: constrains the answer to one of these",
       form=VERBATIM),
    _f("guided_grammar", KEY, BOTH, "string", "vLLM: constrains the answer to a grammar",
       form=VERBATIM),
    _f("guided_whitespace_pattern", KEY, BOTH, "string", "vLLM: whitespace allowed in "
       "guided JSON", form=VERBATIM),
    _f("structural_tag", KEY, BOTH, "string|object", "vLLM: constrains tagged parts of the "
       "answer", form=VERBATIM),
    _f("logit_bias", KEY, BOTH, "object", "bans or favours tokens (multiple-choice harnesses "
       "restrict the answer with it)", unset=({},)),
    _f("allowed_token_ids", KEY, BOTH, "array", "vLLM: the only tokens the model may emit",
       form=VERBATIM),
    _f("bad_words", KEY, BOTH, "array", "vLLM: words the model may not emit", unset=([],),
       form=VERBATIM),
    _f("modalities", KEY, CHAT, "array", "asks for audio as well as text"),
    _f("audio", KEY, CHAT, "object", "the voice and format of an audio answer"),
    # --- what the server returns for the same generation ---
    _f("include_stop_str_in_output", KEY, BOTH, "boolean", "vLLM: the stop string is kept "
       "in the returned text", unset=(False,)),
    _f("skip_special_tokens", KEY, BOTH, "boolean", "vLLM: special tokens are left out of "
       "the returned text", unset=(True,)),
    _f("spaces_between_special_tokens", KEY, BOTH, "boolean", "vLLM: how special tokens are "
       "joined in the returned text", unset=(True,)),
    # --- how the model samples, and where it stops: compared with --strict ---
    _f("temperature", STRICT, BOTH, "number", "sampling temperature"),
    _f("top_p", STRICT, BOTH, "number", "nucleus sampling"),
    _f("top_k", STRICT, BOTH, "integer", "vLLM: top-k sampling"),
    _f("min_p", STRICT, BOTH, "number", "vLLM: min-p sampling"),
    _f("seed", STRICT, BOTH, "integer", "the sampler's seed (also picks the saved sample "
       "with that seed, see the samples rules)"),
    _f("max_tokens", STRICT, BOTH, "integer", "where the answer is cut"),
    _f("max_completion_tokens", STRICT, CHAT, "integer", "where the answer is cut"),
    _f("min_tokens", STRICT, BOTH, "integer", "vLLM: the answer is at least this long"),
    _f("stop", STRICT, BOTH, "string|array", "strings that end the answer"),
    _f("stop_token_ids", STRICT, BOTH, "array", "vLLM: tokens that end the answer"),
    _f("ignore_eos", STRICT, BOTH, "boolean", "vLLM: keep going past the end-of-text token"),
    _f("presence_penalty", STRICT, BOTH, "number", "penalises repeated tokens"),
    _f("frequency_penalty", STRICT, BOTH, "number", "penalises frequent tokens"),
    _f("repetition_penalty", STRICT, BOTH, "number", "vLLM: penalises repeated tokens"),
    _f("length_penalty", STRICT, BOTH, "number", "vLLM: beam search length penalty"),
    _f("use_beam_search", STRICT, BOTH, "boolean", "vLLM: beam search instead of sampling"),
    _f("best_of", STRICT, COMPLETION, "integer", "sample several, return the best n"),
    _f("logprobs", STRICT, CHAT, "boolean", "whether token logprobs are returned"),
    _f("logprobs", STRICT, COMPLETION, "integer", "how many token logprobs are returned"),
    _f("top_logprobs", STRICT, CHAT, "integer", "how many alternatives each logprob lists"),
    _f("prompt_logprobs", STRICT, BOTH, "integer", "vLLM: logprobs of the prompt tokens"),
    _f("return_tokens_as_token_ids", STRICT, BOTH, "boolean", "vLLM: how logprob tokens are "
       "named"),
    _f("return_token_ids", STRICT, BOTH, "boolean", "vLLM: token ids in the response"),
    _f("guided_decoding_backend", STRICT, BOTH, "string", "vLLM: which grammar engine "
       "enforces a guided format"),
    _f("vllm_xargs", STRICT, BOTH, "object", "vLLM: arguments for sampling plugins"),
    # --- transport and bookkeeping ---
    _f("model", IGNORED, BOTH, "string", "selects the saved run (see --model-alias)"),
    _f("n", IGNORED, BOTH, "integer", "how many samples: decided by the samples rules"),
    _f("stream", IGNORED, BOTH, "boolean", "transport: the same answer, streamed"),
    _f("stream_options", IGNORED, BOTH, "object", "transport: what a stream carries"),
    _f("user", IGNORED, BOTH, "string", "bookkeeping: the end user's id"),
    _f("safety_identifier", IGNORED, CHAT, "string", "bookkeeping: the end user's id"),
    _f("metadata", IGNORED, CHAT, "object", "bookkeeping: tags stored with the request"),
    _f("store", IGNORED, CHAT, "boolean", "bookkeeping: whether the provider keeps it"),
    _f("service_tier", IGNORED, BOTH, "string", "transport: the provider's queue"),
    _f("prompt_cache_key", IGNORED, CHAT, "string", "transport: the provider's cache"),
    _f("prediction", IGNORED, CHAT, "object", "speeds up decoding; the answer is the same"),
    _f("request_id", IGNORED, BOTH, "string", "vLLM: a request id for logs"),
    _f("priority", IGNORED, BOTH, "integer", "vLLM: scheduling priority"),
    _f("cache_salt", IGNORED, BOTH, "string", "vLLM: prefix-cache isolation"),
    _f("kv_transfer_params", IGNORED, BOTH, "object", "vLLM: disaggregated serving"),
)

_BY_KIND: dict[str, dict[str, Field]] = {
    kind: {f.name: f for f in FIELDS if kind in f.kinds} for kind in BOTH}
_KEYED: dict[str, dict[str, Field]] = {
    kind: {n: f for n, f in fields.items() if f.role == KEY and n not in ("messages", "prompt")}
    for kind, fields in _BY_KIND.items()}
_NOT_STRICT: dict[str, frozenset[str]] = {
    kind: frozenset(n for n, f in fields.items() if f.role != STRICT)
    for kind, fields in _BY_KIND.items()}
# Key fields that mean nothing without tools (or legacy functions).
_NEEDS_TOOLS = frozenset({"tool_choice", "parallel_tool_calls", "function_call"})


def fields_of(kind: str) -> dict[str, Field]:
    """The table's fields for one endpoint kind, by name."""
    return _BY_KIND[kind]


class Unkeyable(ValueError):
    """A request or saved record whose key cannot be computed (nested too deeply)."""


def drop_nulls(value: Any) -> Any:
    """`value` with every null-valued object field removed, at any depth: for API objects
    only, where null means unset. A flat object with no null (the usual message) is
    returned as it is, not copied: this is on the request path."""
    if isinstance(value, dict):
        for v in value.values():
            if v is None or isinstance(v, dict | list):
                return {k: drop_nulls(v) for k, v in value.items() if v is not None}
        return value
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def verbatim(value: Any) -> dict[str, str]:
    """A value kept exactly, key order and nulls included (a JSON Schema, a template)."""
    return {"$verbatim": orjson.dumps(value).decode()}


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


def _definition(function: Any) -> Any:
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
        out["function"] = _definition(out["function"])
    return out


def _response_format(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = {k: v for k, v in value.items() if v is not None}
    if isinstance(out.get("json_schema"), dict):
        out["json_schema"] = {k: v for k, v in out["json_schema"].items() if v is not None}
        if "schema" in out["json_schema"]:
            out["json_schema"]["schema"] = verbatim(out["json_schema"]["schema"])
    if "schema" in out:
        out["schema"] = verbatim(out["schema"])
    return out


def _structured(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {k: verbatim(v) for k, v in value.items() if v is not None}


_FORMS = {
    API: drop_nulls,
    MESSAGES: lambda v: [_message(m) for m in v] if isinstance(v, list) else v,
    TOOLS: lambda v: [_tool(t) for t in v] if isinstance(v, list) else v,
    FUNCTIONS: lambda v: [_definition(f) for f in v] if isinstance(v, list) else v,
    FORMAT: _response_format,
    STRUCTURED: _structured,
    VERBATIM: verbatim,
}


def _keyed_fields(request: dict[str, Any], kind: str, prompt: dict[str, Any]) -> None:
    keyed = _KEYED[kind]
    names = request.keys() & keyed.keys()
    if not names:
        return
    for name in names:
        value = request[name]
        field = keyed[name]
        if value is None or value in field.unset:
            continue
        prompt[name] = _FORMS[field.form](value)
    if "tools" not in prompt and "functions" not in prompt:
        for name in _NEEDS_TOOLS:
            prompt.pop(name, None)


def chat_prompt(request: dict[str, Any]) -> dict[str, Any]:
    """The keyed part of a chat request, normalised."""
    messages = [_message(m) for m in request.get("messages") or ()]
    prompt: dict[str, Any] = {"v": KEY_VERSION, "kind": CHAT, "messages": messages}
    _keyed_fields(request, CHAT, prompt)
    return prompt


def completion_prompt(prompt: str | list[int], request: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
    """The keyed part of one completion prompt (a batch is keyed prompt by prompt); the
    other key fields come from `request`."""
    keyed: dict[str, Any] = {"v": KEY_VERSION, "kind": COMPLETION, "prompt": prompt}
    if request:
        _keyed_fields(request, COMPLETION, keyed)
    return keyed


def is_token_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )


def split_prompts(prompt: Any) -> list[str | list[int]] | None:
    """The prompts of a completion request, one by one; None if `prompt` has no valid form.

    Accepted: a string, a list of token ids, a list of strings, a list of token-id lists.
    """
    if isinstance(prompt, str) or is_token_ids(prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(is_token_ids(p) for p in prompt):
            return list(prompt)
    return None


def prompts(kind: str, request: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The keyed prompts of a request or a saved record: one for chat, one per prompt of a
    completion batch; None when a completion `prompt` has no valid form. The one place a
    request becomes what is keyed."""
    if kind == CHAT:
        return [chat_prompt(request)]
    split = split_prompts(request.get("prompt"))
    if split is None:
        return None
    return [completion_prompt(p, request) for p in split]


def canonical(prompt: dict[str, Any]) -> bytes:
    """Canonical JSON: sorted keys, compact separators, UTF-8 kept. Raises Unkeyable for a
    value nested too deeply to encode (orjson's limit)."""
    try:
        return orjson.dumps(prompt, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, RecursionError) as e:
        raise Unkeyable(f"cannot encode the prompt: {e}") from None


def digest(canonical_json: bytes) -> bytes:
    """16 bytes of SHA-256 (hardware-accelerated on most CPUs: about twice BLAKE2b's speed
    on a prompt-sized input, and this is on every request)."""
    return hashlib.sha256(canonical_json).digest()[:16]


def key_of(prompt: dict[str, Any]) -> bytes:
    """`digest(canonical(prompt))`, in one step (on every request)."""
    try:
        return hashlib.sha256(orjson.dumps(prompt, option=orjson.OPT_SORT_KEYS)).digest()[:16]
    except (orjson.JSONEncodeError, RecursionError):
        return digest(canonical(prompt))  # raises Unkeyable, as canonical says


def number(value: Any) -> Any:
    """Equal JSON numbers compare equal: an integral float is the integer (0.0 is 0)."""
    if type(value) is float and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    if isinstance(value, list):
        return [number(v) for v in value]
    return value


def sampling_params(request: dict[str, Any], kind: str) -> dict[str, Any]:
    """What `--strict` compares: every field the request sets (null means unset) that is
    neither keyed nor ignored, numbers normalised. Fields the table does not know are
    compared too."""
    skip = _NOT_STRICT[kind]
    return {k: number(v) for k, v in request.items() if k not in skip and v is not None}


def markdown_table() -> str:
    """The README's table of request fields, generated from FIELDS (and tested)."""
    names = {CHAT: "chat", COMPLETION: "completions"}
    rows = ["| field | endpoints | role | why |", "| --- | --- | --- | --- |"]
    rows += [f"| `{f.name}` | {' and '.join(names[k] for k in f.kinds)} | {f.role} | "
             f"{f.reason} |" for f in FIELDS]
    return "\n".join(rows)
