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
