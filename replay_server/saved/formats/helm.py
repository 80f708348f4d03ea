"""Reader for HELM run folders (`helm-run`, crfm-helm).

    runs/<suite>/<run>/scenario_state.json   {"adapter_spec", "request_states": [...]}
    runs/<suite>/<run>/run_spec.json         the run's spec (required beside it)

A request state holds HELM's `Request` (`model`, `prompt` or `messages`, `temperature`,
`num_completions`, `top_k_per_token`, `max_tokens`, `stop_sequences`, `echo_prompt`, ...)
and its `result` (`completions`: `text`, `logprob`, `tokens` [{`text`, `logprob`}],
`finish_reason`, `thinking`). Not saved: the HTTP body, the deployment's client and its
settings. So each state is one record whose request is rebuilt as HELM's OpenAI clients
build it (`clients/openai_client.py`, crfm-helm 0.5.16: `_make_chat_raw_request` for
chat, `_to_raw_completion_request` for the legacy completions client), with the model name
the client sends when the deployment names none (`openai_model_name`): the part of
`request.model` after its `/`. Which client a run used is read from what it saved: the chat
client keeps no tokens, the completions client each token's logprob, so a run with tokens
in any completion is served on /v1/completions, else on /v1/chat/completions.

The answer is the completions as HELM saved them: the text HELM cut at the stop sequences
(a rescore cuts it again, to the same text); on completions, `logprobs` with each saved
token and logprob (`top_logprobs`, `text_offset` null: HELM keeps neither); on chat, the
saved `thinking` as `reasoning_content` (the field HELM read it from). `finish_reason` as
saved, which HELM drops whenever it cuts (without `echo_prompt`: every completions answer,
every chat answer with stop sequences): then null. `usage`, `id` not saved.

Not served (counted): embedding requests, multimodal prompts (their media are files HELM
read), transcription models. Unusable: a state HELM never ran (no `result`), a failed one,
one that saved another number of completions than it asked for. A state repeating an
earlier one's request with the same answer is read once (HELM answered it from its cache);
with another answer, both are kept, each under its instance and trial (`_instance`), so
that the request fails as ambiguous: HELM sends one body for every trial of a zero-shot
prompt, in parallel, and which answer went to which trial cannot be told.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ...errors import LoadError, where_of
from ...paths import CHAT_PATH, COMPLETION_PATH
from ..jsonl import not_json
from ..record import Record, make_record
from .base import (
    LoadContext,
    dig,
    fingerprint,
    read_rows,
    read_side_file,
    saved_answer,
    synthetic_id,
    text_response,
)

HARNESS = "helm"
EMBEDDING = "embedding request (no generation to serve)"
MULTIMODAL = "multimodal prompt (its media are files HELM read, not saved in the run)"
TRANSCRIPTION = "transcription model (the audio file HELM sent is not saved in the run)"
CACHED = ("request repeated with the same answer (HELM answered it from its cache): "
          "read once")
# HELM's OpenAIClientUtils.is_reasoning_model, and the audio models it sends `modalities` for
REASONING = re.compile(r"^o\d+|^gpt-5")
AUDIO = ("gpt-4o-audio-preview", "gpt-4o-mini-audio-preview")
# HELM's Request fields the bodies are made of: default (a field HELM left out has it), type
NUMBER = (int, float)
FIELDS: dict[str, tuple[Any, tuple[type, ...]]] = {
    "prompt": ("", (str,)), "temperature": (1.0, NUMBER), "num_completions": (1, (int,)),
    "top_k_per_token": (1, (int,)), "max_tokens": (100, (int,)),
    "stop_sequences": ([], (list,)), "echo_prompt": (False, (bool,)), "top_p": (1, NUMBER),
    "presence_penalty": (0, NUMBER), "frequency_penalty": (0, NUMBER)}


class HelmReader:
    """HELM run folders: each run's scenario_state.json (run_spec.json beside it)."""

    name = "helm"
    expects = ("HELM run folders: runs/<suite>/<run>/scenario_state.json beside "
               "run_spec.json")

    def detect(self, path: Path, head: bytes) -> bool:
        if path.name == "scenario_state.json":
            return (path.parent / "run_spec.json").is_file()
        return path.name == "run_spec.json" and (path.parent / "scenario_state.json").is_file()

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        for path in files:
            if path.name == "scenario_state.json":  # run_spec.json: claimed, not needed
                yield from _Run(path, ctx).records()


class _Run:
    """One scenario_state.json: its request states, in order."""

    def __init__(self, path: Path, ctx: LoadContext) -> None:
        self.file, self.path, self.ctx = str(path), path, ctx
        self.seen: dict[bytes, tuple[int, bytes]] = {}  # request -> (first state, answer)
        self.endpoint = CHAT_PATH

    def records(self) -> Iterator[Record]:
        data = read_side_file(self.path, self.ctx)
        if data is None:
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            self.ctx.bad(LoadError(self.file, e.lineno, not_json(e)))
            return
        states = dig(obj, "request_states")
        if not isinstance(states, list):
            self.ctx.bad(LoadError(self.file, None, "expected a list: not a HELM scenario "
                                   "state", field="request_states"))
            return
        if any(_tokens(state) for state in states):
            self.endpoint = COMPLETION_PATH
        yield from read_rows(enumerate(states), self._state, self.ctx,
                             place=lambda row: f"request_states[{row[0]}]")

    def fail(self, i: int, name: str, reason: str) -> LoadError:
        """A bad state, named by its place in the file (a JSON file has no line per state)."""
        return LoadError(self.file, None, reason, field=name, place=f"request_states[{i}]")

    def _state(self, row: tuple[int, Any]) -> Record | None:
        """One request state's record; None for a state left out (counted) or read once."""
        i, state = row
        request = state.get("request") if isinstance(state, dict) else None
        if not isinstance(request, dict):
            raise self.fail(i, "request", "expected HELM's Request (an object)")
        saved = self._fields(i, request)
        model = _engine(request.get("model"))
        if model is None:
            raise self.fail(i, "request.model", "expected HELM's `organization/model` name")
        skip = _not_mapped(request, model)
        if skip is not None:
            self.ctx.skip(skip, where_of(self.file, None, f"request_states[{i}]"))
            return None
        body = (_chat(request, saved, model, self._schema(i, request))
                if self.endpoint == CHAT_PATH else _completion(saved, model))
        response, unusable = self._answer(i, saved, state.get("result"), model)
        if self._cached(i, body, response, unusable):
            return None
        return make_record(self.endpoint, model, body, response,
                           {"harness": HARNESS, "instance": _instance(i, state)}, self.file,
                           None, unusable=unusable)

    def _fields(self, i: int, request: dict[str, Any]) -> dict[str, Any]:
        """The Request fields the bodies are made of, checked (defaults where left out)."""
        saved = {name: request.get(name, default) for name, (default, _) in FIELDS.items()}
        for name, value in saved.items():
            types = FIELDS[name][1]
            if not isinstance(value, types) or isinstance(value, bool) != (bool in types):
                raise self.fail(i, f"request.{name}", f"expected {types[0].__name__}, "
                                f"got {type(value).__name__}")
        if not all(isinstance(s, str) for s in saved["stop_sequences"]):
            raise self.fail(i, "request.stop_sequences", "expected a list of strings")
        if saved["num_completions"] < 1:
            raise self.fail(i, "request.num_completions", "expected at least 1")
        return saved

    def _schema(self, i: int, request: dict[str, Any]) -> dict[str, Any] | None:
        """The saved `response_format.json_schema` as HELM's chat client sends it; one HELM
        could not have sent is a bad state, never a body without it."""
        schema, name = dig(request, "response_format", "json_schema"), "request.response_format"
        if not isinstance(request.get("response_format"), dict | None):
            raise self.fail(i, name, "expected HELM's ResponseFormat (an object)")
        if schema is None:
            return None
        name += ".json_schema"
        if not isinstance(schema, dict):
            raise self.fail(i, name, "expected a JSON Schema (an object)")
        if "required" not in schema and not isinstance(schema.get("properties"), dict):
            raise self.fail(i, name, "expected `properties` (an object), which HELM lists "
                            "as `required` when the schema names none")
        schema = dict(schema)  # key order kept: a schema's order is content
        schema.setdefault("additionalProperties", False)
        schema.setdefault("required", list(schema.get("properties") or {}))
        return schema

    def _answer(self, i: int, saved: dict[str, Any], result: Any, model: str
                ) -> tuple[dict[str, Any] | None, str | None]:
        """(response body, why it is unusable) from the state's `result`."""
        if result is None:
            return None, "HELM did not run this request (no result: a dry run?)"
        completions = result.get("completions") if isinstance(result, dict) else None
        if not isinstance(completions, list) or not all(isinstance(c, dict)
                                                        for c in completions):
            raise self.fail(i, "result.completions", "expected a list of completions")
        if result.get("success") is not True:
            return None, f"HELM saved a failed request: {str(result.get('error'))[:300]}"
        n = saved["num_completions"]
        if len(completions) != n:
            return None, f"HELM saved {len(completions)} completions for n = {n}"
        texts = [self._text(i, j, c, saved) for j, c in enumerate(completions)]
        finish = [dig(c, "finish_reason", "reason") for c in completions]
        response = text_response(
            self.endpoint, texts, [r if isinstance(r, str) else None for r in finish],
            id=synthetic_id(HARNESS, self.file, i), model=model,
            logprobs=[self._logprobs(i, j, c) for j, c in enumerate(completions)])
        for choice, completion in zip(response["choices"], completions, strict=True):
            thinking = dig(completion, "thinking", "text")
            if self.endpoint == CHAT_PATH and isinstance(thinking, str):
                choice["message"]["reasoning_content"] = thinking
        return response, None

    def _text(self, i: int, j: int, completion: dict[str, Any], saved: dict[str, Any]) -> str:
        """The text served: as saved, less the prompt HELM's chat client put in front of
        the content for `echo_prompt` (the completions API echoes it itself)."""
        text = completion.get("text")
        if not isinstance(text, str):
            raise self.fail(i, f"result.completions[{j}].text", "expected a string")
        if self.endpoint == CHAT_PATH and saved["echo_prompt"]:
            if not text.startswith(saved["prompt"]):
                raise self.fail(i, f"result.completions[{j}].text", "echo_prompt is set but "
                                "the text does not start with the prompt")
            text = text[len(saved["prompt"]):]
        return text

    def _logprobs(self, i: int, j: int, completion: dict[str, Any]) -> dict[str, Any] | None:
        """A completions choice's `logprobs` from the saved tokens (chat: none asked)."""
        if self.endpoint == CHAT_PATH:
            return None
        tokens = completion.get("tokens", [])
        if not isinstance(tokens, list) or not all(
                isinstance(t, dict) and isinstance(t.get("text"), str)
                and isinstance(t.get("logprob"), int | float) for t in tokens):
            raise self.fail(i, f"result.completions[{j}].tokens",
                            "expected a list of {text, logprob}")
        return {"tokens": [t["text"] for t in tokens],
                "token_logprobs": [t["logprob"] for t in tokens],
                "top_logprobs": None, "text_offset": None}

    def _cached(self, i: int, body: dict[str, Any], response: dict[str, Any] | None,
                unusable: str | None) -> bool:
        """Whether an earlier state sent this request and got this answer (read once)."""
        answer = fingerprint(saved_answer(response, unusable))
        first = self.seen.setdefault(fingerprint([self.endpoint, body]), (i, answer))
        if first[0] == i or first[1] != answer:
            return False
        self.ctx.skip(CACHED, where_of(self.file, None, f"request_states[{i}]"))
        return True


def _tokens(state: Any) -> bool:
    """Whether a state saved tokens in a completion (only HELM's completions client does)."""
    completions = dig(state, "result", "completions")
    return isinstance(completions, list) and any(
        isinstance(c, dict) and isinstance(c.get("tokens"), list) and c["tokens"]
        for c in completions)


def _engine(model: Any) -> str | None:
    """The model name HELM's client sends when its deployment names none: `model_engine`,
    the second `/`-separated part of `request.model` (HELM's `Request.model_engine`)."""
    if not isinstance(model, str) or "/" not in model or not model.split("/")[1]:
        return None
    return model.split("/")[1]


def _not_mapped(request: dict[str, Any], model: str) -> str | None:
    """Why HELM's OpenAI clients send this state's request in a form not rebuilt here."""
    if request.get("embedding"):
        return EMBEDDING
    if request.get("multimodal_prompt") is not None:
        return MULTIMODAL
    if "whisper" in model or "transcribe" in model:
        return TRANSCRIPTION
    return None


def _chat(request: dict[str, Any], saved: dict[str, Any], model: str,
          schema: dict[str, Any] | None) -> dict[str, Any]:
    """`OpenAIClient._make_chat_raw_request`: messages, or the prompt as one user message."""
    messages = request.get("messages") or [{"role": "user", "content": saved["prompt"]}]
    body: dict[str, Any] = {
        "model": model, "messages": messages, "temperature": saved["temperature"],
        "top_p": saved["top_p"], "n": saved["num_completions"],
        "stop": saved["stop_sequences"] or None, "max_tokens": saved["max_tokens"],
        "presence_penalty": saved["presence_penalty"],
        "frequency_penalty": saved["frequency_penalty"]}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "response", "description": "", "schema": schema, "strict": True}}
    if REASONING.match(model):
        if body["max_tokens"]:
            body["max_completion_tokens"] = body.pop("max_tokens")
        for name in ("temperature", "top_p", "frequency_penalty", "presence_penalty"):
            del body[name]
    if model.startswith(AUDIO):
        body["modalities"] = ["text"]
    if body["stop"] is None and (REASONING.match(model) or model.startswith(AUDIO)):
        del body["stop"]
    return body


def _completion(saved: dict[str, Any], model: str) -> dict[str, Any]:
    """`OpenAIClient._to_raw_completion_request`: best_of and logprobs at least n."""
    n, k = saved["num_completions"], saved["top_k_per_token"]
    return {"model": model, "prompt": saved["prompt"], "temperature": saved["temperature"],
            "n": n, "max_tokens": saved["max_tokens"], "best_of": max(k, n),
            "logprobs": max(k, n), "stop": saved["stop_sequences"] or None,
            "top_p": saved["top_p"], "presence_penalty": saved["presence_penalty"],
            "frequency_penalty": saved["frequency_penalty"], "echo": saved["echo_prompt"]}


def _instance(i: int, state: dict[str, Any]) -> str:
    """The state's place in the run: HELM's instance id, its train trial, and the reference,
    request mode and perturbation when it has them."""
    parts = [str(dig(state, "instance", "id") or f"request_states[{i}]"),
             f"trial {state.get('train_trial_index', 0)}"]
    if state.get("reference_index") is not None:
        parts.append(f"reference {state['reference_index']}")
    for value in (state.get("request_mode"), dig(state, "instance", "perturbation", "name")):
        if value:
            parts.append(str(value))
    return ", ".join(parts)
