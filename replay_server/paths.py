"""The HTTP paths replay-server answers, in one place.

A saved record names its endpoint by its path, and so do the routes; the harness readers
name the endpoint their harness called. So the paths live here, importing nothing. Which
family answers which path is the registry's (`wire/families.py`, its `ENDPOINTS`); outside
wire/, only the readers and the routes name a family's path (tests/test_layers.py).
"""

CHAT_PATH = "/v1/chat/completions"
COMPLETION_PATH = "/v1/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"  # Anthropic's
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
# Google's Gemini API: one endpoint whatever the version (v1, v1beta, v1alpha, Vertex AI's
# v1beta1) and path form (Vertex AI's projects/.../publishers/google/models/...) a
# request takes; the model is the record's `model`; `:streamGenerateContent` is this one,
# streamed (wire/gemini/address.py).
GEMINI_PATH = "/v1beta/models/{model}:generateContent"
GEMINI_COUNT_PATH = "/v1beta/models/{model}:countTokens"

# vLLM's tokenizer endpoints, at the root as vLLM serves them (not under /v1).
TOKENIZE_PATH = "/tokenize"
DETOKENIZE_PATH = "/detokenize"
TOKENIZER_INFO_PATH = "/tokenizer_info"

TOKENIZER_ENDPOINTS = (TOKENIZE_PATH, DETOKENIZE_PATH, TOKENIZER_INFO_PATH)
"""The tokenizer endpoints: deterministic answers that never carry a generation."""

MODELS_PATH = "/v1/models"

NO_GENERATION = (*TOKENIZER_ENDPOINTS, MODELS_PATH)
"""Recorded endpoints whose answers carry no generation: the tokenizer's, and a model's
entry in `/v1/models` (one record per model listed: its `max_model_len`)."""
