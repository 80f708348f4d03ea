"""The Gemini request (`models/{model}:generateContent`, and `:countTokens`): every field of
the API, classified (`keys.Field`), and the one form the table reads a request in.

The request's one form (`request_form`, the table's `form`), because the API reads the two
alike:
1. every field name in camelCase: the API reads a field spelled in snake_case
   (`system_instruction`, `max_output_tokens`, `function_call`) as its camelCase name, at
   any depth of its own objects, never inside a value the client wrote (a function call's
   `args`, a function response's `response`, a JSON Schema, `labels`, a tool's
   `customConfigs` and `headers`) nor a schema's property and definition names and the
   values it holds (`example`, `default`); an object that spells a field both ways
   keeps its names as written (which one the API reads cannot be told: neither is left
   out of the key; a request's top-level fields and `generationConfig`'s are refused so);
2. each field of `generationConfig` a field of its own (`generationConfig.temperature`),
   since they differ in role: the answer's form (its MIME type, schema, thinking,
   modalities) is keyed, the sampling parameters are compared under `--strict` only;
3. (countTokens) a request wrapped in `generateContentRequest` is that request: the same
   prompt, counted alike.
Then the key's own normal forms (`parts`, `tools`, `schema`), besides the engine's:
4. bytes sent as base64 (a part's `thoughtSignature`, an `inlineData`'s `data`) in the
   standard alphabet, padded: the API decodes either alphabet, with or without padding, and
   the SDK sends a signature back in the URL-safe one after reading it in the standard one;
5. null-valued fields of the API's objects are unset (`keys.api`); `tools: []`,
   `safetySettings: []`, `thinkingConfig: {}`, `stopSequences: []` and
   `responseMimeType: "text/plain"` (the API's default) are unset; `toolConfig` means
   nothing without `tools`.
6. a function call's `id` (and its response's) by the order the ids first appear
   (`call_ids`): clients make them up.
Not normalised: thought signatures' bytes, a function call's `args` and a schema (kept
exactly, key order included), roles, part order, and any text.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from .. import keys
from ..keys import IGNORED, KEY, STRICT, field, verbatim

KIND = "gemini"
COUNT_KIND = "gemini_count"

CONFIG = "generationConfig"
WRAPPED = "generateContentRequest"  # countTokens' form of a whole request

_SNAKE = re.compile(r"_([a-z0-9])")


def camel(name: str) -> str:
    """A field name in camelCase (`max_output_tokens` -> `maxOutputTokens`)."""
    return _SNAKE.sub(lambda m: m[1].upper(), name) if "_" in name else name


# Values the client wrote (kept exactly), by the camelCase name of the field that holds
# them; and the fields that hold a schema (its field names spelled, its property names
# kept, then kept exactly).
_WRITTEN = frozenset({"args", "response", "partMetadata", "parametersJsonSchema",
                      "responseJsonSchema", "labels", "customConfigs", "headers"})
_SCHEMAS = frozenset({"parameters", "responseSchema"})
# A schema's fields that hold a value the client wrote (an object's field names included),
# and those that hold schemas by names the client chose.
_SCHEMA_VALUES = frozenset({"example", "default"})
_NAMED = frozenset({"properties", "defs"})


def spelled(value: Any) -> Any:
    """An API object (or a list of them) in camelCase at every depth, without null fields;
    bytes in one base64 form; what the client wrote, kept exactly."""
    if isinstance(value, list):
        return [spelled(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, name in _renamed(value).items():
        item = value[key]
        if item is None:
            continue
        if name in _WRITTEN:
            out[name] = verbatim(item)
        elif name in _SCHEMAS:
            out[name] = verbatim(schema(item))
        elif name == "thoughtSignature" and isinstance(item, str):
            out[name] = standard_base64(item)
        elif name == "inlineData" and isinstance(item, dict):
            out[name] = _blob(spelled(item))
        else:
            out[name] = spelled(item)
    return out


def _blob(value: dict[str, Any]) -> dict[str, Any]:
    """Inline bytes (`{"mimeType", "data"}`), their base64 in the one form."""
    data = value.get("data")
    return {**value, "data": standard_base64(data)} if isinstance(data, str) else value


def schema(value: Any) -> Any:
    """A Schema object in camelCase, its properties' and definitions' names and the
    values it holds (`example`, `default`) as written."""
    if isinstance(value, list):
        return [schema(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, name in _renamed(value).items():
        item = value[key]
        if name in _NAMED and isinstance(item, dict):
            out[name] = {k: schema(v) for k, v in item.items()}
        elif name in _SCHEMA_VALUES:
            out[name] = item
        elif item is not None or name not in out:  # (null is unset: never over a value)
            out[name] = schema(item)
    return out


def _renamed(value: dict[str, Any]) -> dict[str, str]:
    """Each field's name in camelCase; each as written in an object that spells a field
    both ways (which one the API reads cannot be told: neither is left out of the key)."""
    names = {key: camel(key) for key in value}
    spelled = [names[k] for k, v in value.items() if v is not None]
    return names if len(set(spelled)) == len(spelled) else {k: k for k in value}


def standard_base64(text: str) -> str:
    """Base64 in the standard alphabet, padded; `text` itself if it is not base64."""
    plain = text.replace("-", "+").replace("_", "/").rstrip("=")
    try:
        raw = base64.b64decode(plain + "=" * (-len(plain) % 4), validate=True)
    except (binascii.Error, ValueError):
        return text
    return base64.b64encode(raw).decode("ascii")


def request_form(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request as the table reads it: its fields' names in camelCase (a name the
    table does not know, as it is sent), `generationConfig`'s fields as fields of their
    own (`generationConfig.NAME`); countTokens' `generateContentRequest` unwrapped (its
    `model` is the path's). A field the request spells both ways is read as its last
    spelling (`request.check` refuses such a request, and a saved one)."""
    sent_as, inner = wrapped(request)
    if isinstance(inner, dict) and "contents" not in request:
        request = {**{k: v for k, v in inner.items() if k != "model"},
                   **{k: v for k, v in request.items() if k != sent_as}}
    out: dict[str, Any] = {}
    for key, value in request.items():
        name = _known(key)
        if name == CONFIG and isinstance(value, dict):
            for inner, setting in value.items():
                if setting is not None:
                    out[_known(f"{CONFIG}.{inner}")] = setting
        elif value is not None:  # (null is unset: never over the other spelling's value)
            out[name] = value
    return out


def wrapped(request: Mapping[str, Any]) -> tuple[str | None, Any]:
    """countTokens' whole request (`generateContentRequest`, in either spelling): the name
    it is sent by and its value; (None, None) when there is none."""
    for name, value in request.items():
        if value is not None and camel(name) == WRAPPED:
            return name, value
    return None, None


def contents(value: Any) -> Any:
    """The conversation in the one form, its function calls' ids numbered (`call_ids`)."""
    return call_ids(spelled(value))


_CALLS = ("functionCall", "functionResponse")


def call_ids(turns: Any) -> Any:
    """The conversation with each function call's `id` (and the `id` of the response that
    answers it) replaced by its number in order of first appearance: the API sends calls
    without ids and clients make up random ones (inspect_ai: `NAME_<uuid>`) that they
    send back next turn, so a rescoring run's ids are never the original's. Which
    response answers which call stays in the key; the names do not."""
    numbers: dict[str, str] = {}

    def numbered(part: Any) -> Any:
        if not isinstance(part, dict):
            return part
        out = dict(part)
        for name in _CALLS:
            call = part.get(name)
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                out[name] = {**call, "id": numbers.setdefault(call["id"], f"#{len(numbers)}")}
        return out

    if not isinstance(turns, list):
        return turns
    return [{**turn, "parts": [numbered(p) for p in turn["parts"]]}
            if isinstance(turn, dict) and isinstance(turn.get("parts"), list) else turn
            for turn in turns]


# Every field that gives the model tools: `toolConfig` acts on them.
_TOOLS = ("tools",)


def _config(name: str, role: str, types: str, reason: str, **kw: Any) -> keys.Field:
    return field(f"{CONFIG}.{name}", role, types, reason, **kw)


# The fields of a request that countTokens counts too.
PROMPT_FIELDS = (
    # --- what the model sees
    field("contents", KEY, "array", "the conversation the model continues", form=contents),
    field("systemInstruction", KEY, "object", "the system instruction put before the "
          "conversation", form=spelled),
    field("tools", KEY, "array", "tool declarations are rendered into the prompt",
          unset=([],), form=spelled),
    field("cachedContent", KEY, "string", "a cached prefix of the conversation, by name"),
    field("continuationToken", KEY, "string", "resumes an answer that stopped with "
          "`CONTINUATION`: the rest of that one, not a fresh answer"),
    # --- what the model may emit
    field("toolConfig", KEY, "object", "forces, forbids or allows a function call "
          "(dropped when no `tools` are given)", unset=({},), form=spelled, needs=_TOOLS),
    field("safetySettings", KEY, "array", "which answers are blocked", unset=([],),
          form=spelled),
    field("modelArmorConfig", KEY, "object", "Vertex AI: which prompts and answers Model "
          "Armor sanitizes or blocks", form=spelled),
    field("outputConfig", KEY, "object", "Vertex AI: generated media written to storage, "
          "answered as file URIs instead of inline bytes", form=spelled),
    _config("responseMimeType", KEY, "string", "the answer's format (JSON mode)",
            unset=("text/plain",)),
    _config("responseSchema", KEY, "object", "the schema the answer follows",
            form=lambda v: verbatim(schema(v))),
    _config("responseJsonSchema", KEY, "object|boolean", "the JSON Schema the answer "
            "follows", form=verbatim),
    _config("responseModalities", KEY, "array", "asks for images or audio as well as text"),
    _config("thinkingConfig", KEY, "object", "thinking on or off, its budget or level, and "
            "whether thoughts are returned", unset=({},), form=spelled),
    _config("speechConfig", KEY, "object", "the voice of an audio answer", form=spelled),
    _config("imageConfig", KEY, "object", "the form of an image answer", form=spelled),
    _config("mediaResolution", KEY, "string", "how images and video are tokenized: what "
            "the model sees"),
    _config("audioTimestamp", KEY, "boolean", "timestamps in what the model hears",
            unset=(False,)),
    _config("enableEnhancedCivicAnswers", KEY, "boolean", "changes answers on civic topics",
            unset=(False,)),
    _config("routingConfig", KEY, "object", "Vertex AI: which model answers", form=spelled),
    _config("modelConfig", KEY, "object", "Vertex AI: which model answers (its feature "
            "selection preference)", form=spelled),
    _config("audioTranscriptionConfig", KEY, "object", "asks for a transcription of the "
            "audio as well", form=spelled),
    # --- how the model samples, and where it stops: compared with --strict
    _config("temperature", STRICT, "number", "sampling temperature"),
    _config("topP", STRICT, "number", "nucleus sampling"),
    _config("topK", STRICT, "number", "top-k sampling"),
    _config("seed", STRICT, "integer", "the sampler's seed"),
    _config("maxOutputTokens", STRICT, "integer", "where the answer is cut (thoughts "
            "included)"),
    _config("stopSequences", STRICT, "array", "strings that end the answer", unset=([],),
            items="string"),
    _config("presencePenalty", STRICT, "number", "penalises repeated tokens"),
    _config("frequencyPenalty", STRICT, "number", "penalises frequent tokens"),
    _config("responseLogprobs", STRICT, "boolean", "whether token logprobs are returned"),
    _config("logprobs", STRICT, "integer", "how many alternatives each logprob lists"),
    # --- transport and bookkeeping
    _config("candidateCount", IGNORED, "integer", "how many candidates: decided by the "
            "samples rules, as `n` is"),
    field("model", IGNORED, "string", "the path's model (`models/{model}:...`): selects the "
          "saved run (see --model-alias)"),
    field(CONFIG, IGNORED, "object", "its fields are the `generationConfig.*` rows, each "
          "classified (snake_case spellings read as camelCase)"),
    field("labels", IGNORED, "object", "bookkeeping: billing labels (Vertex AI)"),
    field("serviceTier", IGNORED, "string", "transport: the serving tier (latency and "
          "price), the same model"),
    field("store", IGNORED, "boolean", "bookkeeping: whether Google logs the request"),
)

FIELDS = (
    *PROMPT_FIELDS,
    field("stream", IGNORED, "boolean", "transport: the same answer, streamed (the path's "
          "`:streamGenerateContent`)"),
    field("alt", IGNORED, "string", "transport: how a stream is framed (the query's "
          "`alt=sse`: server-sent events; else one JSON array)"),
)

COUNT_FIELDS = (
    *PROMPT_FIELDS,
    field(WRAPPED, IGNORED, "object", "a whole generateContent request, counted as if its "
          "fields were the request's own"),
)

_NAMES = frozenset(f.name for f in (*FIELDS, *COUNT_FIELDS))


def _known(name: str) -> str:
    """A field's name as the table knows it: camelCase, if that is a name of the table."""
    spelled = camel(name)
    return spelled if spelled in _NAMES else name


TABLE = keys.Table(KIND, FIELDS, own=("contents",), form=request_form)
COUNT_TABLE = keys.Table(COUNT_KIND, COUNT_FIELDS, own=("contents",), form=request_form)
