"""The request fields that chat and completions share (the OpenAI fields of both, and
vLLM's sampling, guided-decoding and returned-text parameters), each defined once: the two
families' tables (`chat/fields.py`, `completions/fields.py`) put them among their own."""

from __future__ import annotations

from typing import Any

from ..keys import IGNORED, KEY, STRICT, field, structured, verbatim


def response_format(value: Any) -> Any:
    """`response_format`: an API object around a verbatim JSON Schema."""
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


# --- what the model sees
SEES = (
    field("truncate_prompt_tokens", KEY, "integer", "vLLM: cuts the prompt the model sees"),
    field("truncation_side", KEY, "string", "vLLM: which end of the prompt "
          "`truncate_prompt_tokens` cuts"),
)
# --- what the model may emit
EMITS = (
    field("response_format", KEY, "object", "constrains the answer to JSON or a schema",
          unset=({"type": "text"},), form=response_format),
    field("structured_outputs", KEY, "object", "vLLM: constrains the answer to a schema, "
          "regex, choice or grammar", unset=({},), form=structured),
    field("guided_json", KEY, "string|object", "vLLM: constrains the answer to a JSON Schema",
          form=verbatim),
    field("guided_regex", KEY, "string", "vLLM: constrains the answer to a regex",
          form=verbatim),
    field("guided_choice", KEY, "array", "vLLM: constrains the answer to one of these",
          form=verbatim),
    field("guided_grammar", KEY, "string", "vLLM: constrains the answer to a grammar",
          form=verbatim),
    field("guided_whitespace_pattern", KEY, "string", "vLLM: whitespace allowed in guided "
          "JSON", form=verbatim),
    field("structural_tag", KEY, "string|object", "vLLM: constrains tagged parts of the "
          "answer", form=verbatim),
    field("logit_bias", KEY, "object", "bans or favours tokens (multiple-choice harnesses "
          "restrict the answer with it)", unset=({},)),
    field("allowed_token_ids", KEY, "array", "vLLM: the only tokens the model may emit",
          form=verbatim),
    field("bad_words", KEY, "array", "vLLM: words the model may not emit", unset=([],),
          form=verbatim),
    field("logits_processors", KEY, "array", "vLLM: custom logits processors change what "
          "the model may emit", unset=([],), form=verbatim),
)
# --- what the server returns for the same generation
RETURNS = (
    field("include_stop_str_in_output", KEY, "boolean", "vLLM: the stop string is kept in "
          "the returned text", unset=(False,)),
    field("skip_special_tokens", KEY, "boolean", "vLLM: special tokens are left out of the "
          "returned text", unset=(True,)),
    field("spaces_between_special_tokens", KEY, "boolean", "vLLM: how special tokens are "
          "joined in the returned text", unset=(True,)),
)
# --- how the model samples, where it stops, what else is returned: --strict
SAMPLING = (
    field("temperature", STRICT, "number", "sampling temperature"),
    field("top_p", STRICT, "number", "nucleus sampling"),
    field("top_k", STRICT, "integer", "vLLM: top-k sampling"),
    field("min_p", STRICT, "number", "vLLM: min-p sampling"),
    field("seed", STRICT, "integer", "the sampler's seed (also picks the saved sample with "
          "that seed, see the samples rules)"),
    field("max_tokens", STRICT, "integer", "where the answer is cut"),
    field("min_tokens", STRICT, "integer", "vLLM: the answer is at least this long"),
    field("thinking_token_budget", STRICT, "integer", "vLLM: where the reasoning is cut",
          unset=(-1,)),
    field("stop", STRICT, "string|array", "strings that end the answer", items="string"),
    field("stop_token_ids", STRICT, "array", "vLLM: tokens that end the answer"),
    field("ignore_eos", STRICT, "boolean", "vLLM: keep going past the end-of-text token"),
    field("repetition_detection", STRICT, "object", "vLLM: the answer ends early where it "
          "repeats itself"),
    field("presence_penalty", STRICT, "number", "penalises repeated tokens"),
    field("frequency_penalty", STRICT, "number", "penalises frequent tokens"),
    field("repetition_penalty", STRICT, "number", "vLLM: penalises repeated tokens"),
    field("watermarking", STRICT, "boolean", "vLLM: a watermark biases the sampling"),
    field("length_penalty", STRICT, "number", "vLLM: beam search length penalty"),
    field("use_beam_search", STRICT, "boolean", "vLLM: beam search instead of sampling"),
    field("best_of", STRICT, "integer", "sample several, return the best n"),
    field("prompt_logprobs", STRICT, "integer", "vLLM: logprobs of the prompt tokens"),
    field("logprob_token_ids", STRICT, "array", "vLLM: the tokens whose logprobs are "
          "returned"),
    field("return_tokens_as_token_ids", STRICT, "boolean", "vLLM: how logprob tokens are "
          "named"),
    field("return_token_ids", STRICT, "boolean", "vLLM: token ids in the response"),
    field("routed_experts_prompt_start", STRICT, "integer", "vLLM: which expert routing "
          "data the response carries"),
    field("guided_decoding_backend", STRICT, "string", "vLLM: which grammar engine enforces "
          "a guided format"),
    field("vllm_xargs", STRICT, "object", "vLLM: arguments for sampling plugins"),
)
# --- transport and bookkeeping
TRANSPORT = (
    field("model", IGNORED, "string", "selects the saved run (see --model-alias)"),
    field("n", IGNORED, "integer", "how many samples: decided by the samples rules"),
    field("stream", IGNORED, "boolean", "transport: the same answer, streamed"),
    field("stream_options", IGNORED, "object", "transport: what a stream carries"),
    field("stream_interval", IGNORED, "integer", "vLLM: tokens per streamed chunk"),
    field("user", IGNORED, "string", "bookkeeping: the end user's id"),
    field("service_tier", IGNORED, "string", "transport: the provider's queue"),
    field("request_id", IGNORED, "string", "vLLM: a request id for logs"),
    field("session_id", IGNORED, "string", "vLLM: a session id for routing"),
    field("priority", IGNORED, "integer", "vLLM: scheduling priority"),
    field("cache_salt", IGNORED, "string", "vLLM: prefix-cache isolation"),
    field("kv_transfer_params", IGNORED, "object", "vLLM: disaggregated serving"),
    field("ec_transfer_params", IGNORED, "object", "vLLM: disaggregated serving"),
    field("return_token_offsets", IGNORED, "boolean", "vLLM: only the render endpoints "
          "read it"),
    field("return_mm_kwargs", IGNORED, "boolean", "vLLM: only the render endpoints read it"),
)
