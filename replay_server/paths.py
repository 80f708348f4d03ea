"""The HTTP paths of the API families replay-server answers, in one place.

Every stage names an endpoint by its path (a saved record's `endpoint`, the key's kind,
the route that answers it), so the paths live here, importing nothing.
"""

CHAT_PATH = "/v1/chat/completions"
COMPLETION_PATH = "/v1/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"  # Anthropic's
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"

ENDPOINTS = (CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH, MESSAGES_PATH, COUNT_TOKENS_PATH)
"""The replay endpoints: their answers are saved generations."""

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
