"""inspect_ai's `google/` model calls, as the Gemini API received and answered them: the
Gemini records (`record`) the inspect reader makes of them.

inspect's `google/` provider calls the google-genai SDK, and a model event's `call.request`
is not the body the SDK sent but the SDK call's arguments, dumped in the API's camelCase:
`{"contents", "generation_config", "safety_settings", "tools", "tool_config",
"system_instruction"}`. The body is rebuilt here as google-genai (3.6) builds it
(`models.generate_content`'s converters, read from its source):
- `contents`, `tools`, `safetySettings` and `toolConfig` as they are (the SDK sends
  `contents` back with thought signatures in the URL-safe base64 alphabet, as inspect logs
  them);
- `systemInstruction` one user Content: inspect logs a list of texts (or of parts), which
  the SDK sends as `{"parts": [{"text": ...}, ...], "role": "user"}`;
- `generationConfig` the config's own fields: the request-level ones move out to the top
  (`systemInstruction`, `safetySettings`, `tools`, `toolConfig`, `labels`,
  `cachedContent`, ...) and the SDK's own (`httpOptions`: inspect's request-id header,
  `automaticFunctionCalling`, ...) are not sent. The SDK always sends it, `{}` at least.
The SDK sends a few nested names in snake_case (`thinkingConfig.include_thoughts`, a
function declaration's `parameters_json_schema`: objects its converters pass through);
they are spelled here as the API documents them, and the API (and the Gemini family's
keys) read both spellings alike.

`call.response` is the SDK's dump of the `GenerateContentResponse`: the response as the
API sent it (fields the SDK does not know left out), plus `sdkHttpResponse` (its headers)
and the SDK's own fields, dropped here; and with bytes re-encoded in the URL-safe base64
alphabet, put back in the standard one the API sends (`thoughtSignature`, inline data):
the same bytes. A streamed call's is inspect's own aggregate of the chunks (parts merged),
without `sdkHttpResponse`.

inspect's layouts, by version: from 0.3.69 (google-genai) to 0.3.138 the config was logged
whole (system instruction, tools and safety settings inside it, and no top-level
`system_instruction`); from 0.3.139 they are top-level fields; from 0.3.195 `contents`
lives in the sample's call pool (`call_refs`, `call_key: "contents"`, put back by the
reader). Before 0.3.69 inspect called the google.generativeai SDK (the system message
folded into the first user turn, the response a snake_case proto dump): not read. A failed
call is logged with `{"error": {"message", "code"}}` and the event's `error`; a call that
was retried after a 429 is one failed event, then one that answered. countTokens calls are
not logged. When a candidate's function call is malformed, inspect asks again with a longer
conversation and logs the first request with the last answer: such a call is unusable,
as a failed one is. A streamed call is a record like any other (no frames: a log keeps
none); the replay streams its response again in small chunks.
"""

from __future__ import annotations

from typing import Any

from ...paths import GEMINI_PATH
from ..record import Record, make_record

# GenerateContentConfig fields the SDK sends at the request's top level, not in
# `generationConfig`; and those it never sends.
REQUEST_LEVEL = ("systemInstruction", "safetySettings", "tools", "toolConfig", "labels",
                 "cachedContent", "serviceTier", "continuationToken", "store",
                 "modelArmorConfig")
SDK_ONLY = ("httpOptions", "shouldReturnHttpResponse", "automaticFunctionCalling",
            "automaticContinuation")
# inspect's names for the request-level arguments it logs beside the config
LOGGED = {"system_instruction": "systemInstruction", "safety_settings": "safetySettings",
          "tools": "tools", "tool_config": "toolConfig"}
# GenerateContentResponse fields of the SDK's own, never sent by the API
SDK_RESPONSE = ("sdkHttpResponse", "automaticFunctionCallingHistory", "parsed")
PROVIDER = "google/"
VERTEX = "vertex/"
OLD_SDK = ("a google/ call logged by inspect before 0.3.69 (the google.generativeai SDK: "
           "its request is not logged as sent)")
RETRIED = ("inspect asked again after a malformed function call: the log holds the first "
           "request and the last answer")


def is_gemini(request: dict[str, Any]) -> bool:
    """Whether a logged request is a `google/` call's: its arguments name a config."""
    return "generation_config" in request and isinstance(request.get("contents"), list)


def wire_request(logged: dict[str, Any]) -> dict[str, Any]:
    """The JSON body google-genai sent for the call arguments inspect logged (`contents`
    already put back from the call pool)."""
    config = dict(logged.get("generation_config") or {})
    body: dict[str, Any] = {"contents": logged["contents"]}
    for name, field in LOGGED.items():
        if logged.get(name) is not None:
            body[field] = logged[name]
    for field in REQUEST_LEVEL:
        if config.get(field) is not None:  # what the SDK was given wins over inspect's copy
            body[field] = config[field]
    if "systemInstruction" in body:
        body["systemInstruction"] = _content(body["systemInstruction"])
    body["generationConfig"] = {k: v for k, v in config.items()
                                if k not in REQUEST_LEVEL and k not in SDK_ONLY}
    return body


def _content(value: Any) -> Any:
    """A Content, as the SDK makes one of a system instruction: a Content as it is; a text,
    a part or a list of them, one user Content of those parts."""
    if isinstance(value, dict) and "parts" in value:
        return value
    parts = value if isinstance(value, list) else [value]
    return {"parts": [{"text": p} if isinstance(p, str) else p for p in parts],
            "role": "user"}


def wire_response(logged: dict[str, Any]) -> dict[str, Any]:
    """The response the API sent, from the SDK's dump of it."""
    body = {k: v for k, v in logged.items() if k not in SDK_RESPONSE}
    return dict(_standard_bytes(body))


def _standard_bytes(value: Any, inline: bool = False) -> Any:
    """`value` with its bytes fields (`thoughtSignature`, `inlineData.data`) in standard
    base64, as the API sends them (the SDK dumps them URL-safe)."""
    if isinstance(value, list):
        return [_standard_bytes(v) for v in value]
    if not isinstance(value, dict):
        return value
    return {k: _standard(v) if k == "thoughtSignature" or (inline and k == "data")
            else _standard_bytes(v, k == "inlineData") for k, v in value.items()}


def _standard(value: Any) -> Any:
    return value.replace("-", "+").replace("_", "/") if isinstance(value, str) else value


def old_sdk(response: Any) -> bool:
    """Whether a call was logged by inspect before 0.3.69 (the google.generativeai SDK):
    its response is a proto's snake_case dump."""
    return isinstance(response, dict) and "usage_metadata" in response


def retried(output: Any, response: dict[str, Any]) -> bool:
    """Whether inspect asked again after a malformed function call: the event's usage sums
    every attempt's, the response is the last attempt's."""
    usage = output.get("usage") if isinstance(output, dict) else None
    metadata = response.get("usageMetadata")
    if not (isinstance(usage, dict) and isinstance(metadata, dict)):
        return False
    total, last = usage.get("total_tokens"), metadata.get("totalTokenCount")
    return isinstance(total, int) and isinstance(last, int) and total > last


def model_of(event_model: str) -> str:
    """The model of the request's path: inspect's name without `google/` and the service
    (`google/vertex/M`)."""
    return event_model.removeprefix(PROVIDER).removeprefix(VERTEX)


def record(event: dict[str, Any], logged: dict[str, Any], saved: Any, unusable: str | None,
           source: dict[str, Any], file: str) -> Record:
    """The Gemini record of a `google/` call: the body the SDK sent for `logged` (its
    `contents` put back, attachments resolved), the response the API sent, or why none
    can be served (`unusable`: the call failed; else a retried or missing answer)."""
    response = wire_response(saved) if unusable is None and isinstance(saved, dict) else None
    if unusable is None:
        if response is None:
            unusable = "the Gemini call saved no response"
        elif retried(event.get("output"), response):
            response, unusable = None, RETRIED
    return make_record(GEMINI_PATH, model_of(str(event.get("model") or "")),
                       wire_request(logged), response, source, file, None,
                       unusable=unusable)
