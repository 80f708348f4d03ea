"""Gemini's key: camelCase and snake_case spellings key alike, base64 in either alphabet
keys alike, the unset values are unset; everything that changes what the model sees or
emits is keyed, the sampling parameters are not (--strict compares them)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from replay_server.errors import BadRequest
from replay_server.paths import GEMINI_COUNT_PATH, GEMINI_PATH
from replay_server.wire import keys
from replay_server.wire.families import family_of

SIGNATURE = "c2lnbmF0dXJlPz8+Pz4="  # standard base64 of b"signature??>?>", with + and /
TOOL: Any = {"functionDeclarations": [{"name": "calc", "description": "Evaluate.", "parameters": {
    "type": "OBJECT", "properties": {"max_value": {"type": "NUMBER"}},
    "propertyOrdering": ["max_value"]}}]}
CAMEL: Any = {
    "contents": [
        {"role": "user", "parts": [{"text": "Use the calculator: 2 + 2?"},
                                   {"inlineData": {"mimeType": "image/png", "data": "iVBO+/8="}}]},
        {"role": "model", "parts": [
            {"functionCall": {"name": "calc", "args": {"b": 2, "a": 2}},
             "thoughtSignature": SIGNATURE}]},
        {"role": "user", "parts": [{"functionResponse": {
            "name": "calc", "response": {"result_value": 4}}}]}],
    "systemInstruction": {"parts": [{"text": "Be brief."}]},
    "tools": [TOOL],
    "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
    "generationConfig": {"temperature": 0, "maxOutputTokens": 64,
                         "responseMimeType": "application/json",
                         "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 128}},
}
SNAKE: Any = {
    "contents": [
        {"role": "user", "parts": [{"text": "Use the calculator: 2 + 2?"},
                                   {"inline_data": {"mime_type": "image/png", "data": "iVBO-_8"}}]},
        {"role": "model", "parts": [
            {"function_call": {"name": "calc", "args": {"b": 2, "a": 2}},
             "thought_signature": SIGNATURE.replace("+", "-").replace("/", "_").rstrip("=")}]},
        {"role": "user", "parts": [{"function_response": {
            "name": "calc", "response": {"result_value": 4}}}]}],
    "system_instruction": {"parts": [{"text": "Be brief."}]},
    "tools": [{"function_declarations": [{"name": "calc", "description": "Evaluate.",
                                          "parameters": {
                                              "type": "OBJECT",
                                              "properties": {"max_value": {"type": "NUMBER"}},
                                              "property_ordering": ["max_value"]}}]}],
    "tool_config": {"function_calling_config": {"mode": "ANY"}},
    "generation_config": {"temperature": 0.0, "max_output_tokens": 64,
                          "response_mime_type": "application/json",
                          "thinking_config": {"include_thoughts": True, "thinking_budget": 128}},
}


def key(body: dict[str, Any], path: str = GEMINI_PATH) -> bytes:
    return family_of(path).parse(orjson.dumps(body)).keys[0]


def params(body: dict[str, Any]) -> dict[str, Any]:
    return dict(orjson.loads(family_of(GEMINI_PATH).parse(orjson.dumps(body)).params()))


BASE = key(CAMEL)


def changed(edit: Any) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(CAMEL)
    edit(body)
    return body


def test_snake_case_and_the_url_safe_alphabet_key_as_camel_case_does() -> None:
    """The API reads both spellings of every field, and bytes in either base64 alphabet
    with or without padding; the SDK sends a signature back re-encoded URL-safe."""
    assert key(SNAKE) == BASE
    assert params(SNAKE) == params(CAMEL) == {
        "generationConfig.temperature": 0, "generationConfig.maxOutputTokens": 64}


@pytest.mark.parametrize("edit", [
    lambda b: b.update(tools=[TOOL], safetySettings=[]),
    lambda b: b["generationConfig"].update(candidateCount=1, seed=7, topK=40.0, topP=0.9,
                                           stopSequences=["\n"], presencePenalty=0.1),
    lambda b: b.update(labels={"team": "eval"}, model="gemini-2.5-flash", stream=True,
                       alt="sse"),
    lambda b: b["contents"][0]["parts"][0].update(thought=None),
    lambda b: b["generationConfig"].update(responseSchema=None, speechConfig=None),
], ids=["unset-values", "sampling", "transport", "null-field", "null-config"])
def test_what_does_not_change_the_answer_does_not_change_the_key(edit: Any) -> None:
    assert key(changed(edit)) == BASE


def test_the_unset_values_are_unset() -> None:
    plain: Any = {"contents": CAMEL["contents"][:1]}
    assert key(plain) == key({**plain, "tools": [], "safetySettings": [],
                              "toolConfig": {"functionCallingConfig": {"mode": "NONE"}},
                              "generationConfig": {"responseMimeType": "text/plain",
                                                   "thinkingConfig": {}}})


@pytest.mark.parametrize("edit", [
    lambda b: b["contents"][0]["parts"][0].update(text="Use the calculator: 2 + 3?"),
    lambda b: b["contents"][0].update(role="model"),
    lambda b: b["contents"][1]["parts"][0]["functionCall"].update(args={"a": 2, "b": 2}),
    lambda b: b["contents"][1]["parts"][0].update(thoughtSignature="b3RoZXI="),
    lambda b: b["contents"][0]["parts"][1]["inlineData"].update(data="iVBO+/4="),
    lambda b: b["contents"][2]["parts"][0]["functionResponse"].update(
        response={"resultValue": 4}),
    lambda b: b["systemInstruction"]["parts"][0].update(text="Be brief!"),
    lambda b: b["tools"][0]["functionDeclarations"][0]["parameters"]["properties"].update(
        {"maxValue": {"type": "NUMBER"}}),
    lambda b: b["toolConfig"]["functionCallingConfig"].update(mode="AUTO"),
    lambda b: b["generationConfig"].update(responseMimeType="text/x.enum"),
    lambda b: b["generationConfig"]["thinkingConfig"].update(thinkingBudget=0),
    lambda b: b["generationConfig"].update(responseModalities=["TEXT", "IMAGE"]),
    lambda b: b.update(cachedContent="cachedContents/abc"),
    lambda b: b.update(safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT",
                                        "threshold": "BLOCK_NONE"}]),
], ids=["text", "role", "args-order", "signature", "inline-bytes", "response-names",
        "system", "schema-property-name", "tool-mode", "mime-type", "thinking", "modalities",
        "cache", "safety"])
def test_a_change_to_what_the_model_sees_or_emits_changes_the_key(edit: Any) -> None:
    assert key(changed(edit)) != BASE


def test_the_tool_config_means_nothing_without_tools() -> None:
    plain: Any = {"contents": CAMEL["contents"][:1]}
    assert key({**plain, "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}) == key(plain)


def test_a_count_keys_its_prompt_wrapped_or_not_apart_from_an_answer() -> None:
    plain = {"contents": CAMEL["contents"]}
    wrapped = {"generateContentRequest": {"model": "models/gemini-2.5-flash", **plain}}
    assert key(plain, GEMINI_COUNT_PATH) == key(wrapped, GEMINI_COUNT_PATH)
    assert key(plain, GEMINI_COUNT_PATH) != key(plain)
    prompt = family_of(GEMINI_COUNT_PATH).prompts(wrapped, None)
    assert prompt is not None and prompt[0]["kind"] == "gemini_count"


def test_the_key_is_of_the_one_version() -> None:
    (prompt,) = family_of(GEMINI_PATH).prompts(CAMEL, None) or []
    assert prompt["v"] == keys.KEY_VERSION and prompt["kind"] == "gemini"
    # the signature in the one form: standard alphabet, padded
    assert prompt["contents"][1]["parts"][0]["thoughtSignature"] == SIGNATURE


@pytest.mark.parametrize(("body", "param"), [
    ({**CAMEL, "generationConfig": {"temperature": "hot"}}, "generationConfig.temperature"),
    ({**CAMEL, "generation_config": {"max_output_tokens": 1.5}},
     "generationConfig.maxOutputTokens"),
    ({**CAMEL, "generationConfig": "greedy"}, "generationConfig"),
    ({**CAMEL, "tools": {}}, "tools"),
])
def test_a_mistyped_field_is_a_400_naming_it_in_its_one_spelling(body: dict[str, Any],
                                                                  param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        key(body)
    assert caught.value.param == param and f"`{param}` must be" in caught.value.message
