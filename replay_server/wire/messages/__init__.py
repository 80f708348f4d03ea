"""Anthropic's Messages API (`POST /v1/messages`), as Anthropic serves it.

- `fields.py`: the field table (and count_tokens', its prompt fields) and the normal forms
  of messages, blocks, tools and output formats; `request.py`: the checks, the keyed
  prompt, and whether a request is Anthropic's (`anthropic-version`);
- `answer.py`: what a usable saved message (and count) is, and what makes two saved
  messages the same generation;
- `stream_in.py`: a Messages stream (named events) -> the message a plain request gets;
- `stream_out.py`: the events Anthropic sends for a saved message, its texts in
  token-sized deltas;
- `envelope.py`: Anthropic's error envelope; `models.py`: its list of models.

A reply is the saved message as it was (content blocks verbatim, thinking `signature`s
included, `stop_reason`, `stop_sequence`, `usage` with its cache fields, `id`), with a
`request-id` header; a Messages request has no `n`. `COUNT_TOKENS` answers
`/v1/messages/count_tokens` with the saved count, keyed by the same prompt fields (its own
kind: a count is no generation of the same prompt).
"""

from ...paths import COUNT_TOKENS_PATH, MESSAGES_PATH
from ..family import Family
from ..selection import encode
from . import answer, request, stream_in, stream_out
from .envelope import SCHEMA, error_body
from .fields import COUNT_KIND, COUNT_TABLE, HEADERS, KIND, TABLE
from .models import models_body

_SCHEMA_MESSAGES = {"messages": {"type": "array", "items": {"type": "object"}}}


def _x_api_key(key: str) -> tuple[str, str]:
    """Anthropic's API reads an API key from `x-api-key` (a Bearer token is an OAuth
    token there, not a key)."""
    return "x-api-key", key


def _no_stream(selections: object, include_usage: bool) -> bytes:
    raise AssertionError("count_tokens does not stream: its check refuses `stream`")


FAMILY = Family(
    name="messages", kind=KIND, path=MESSAGES_PATH, table=TABLE, prompt_field="messages",
    check=request.check, prompts=request.prompts, reply=encode, stream=stream_out.stream,
    aggregator=stream_in.MessagesStreamAggregator, aggregate=stream_in.aggregate,
    schema=TABLE.schema("messages", _SCHEMA_MESSAGES), error_body=error_body,
    error_schema=SCHEMA, headers=HEADERS, id_header=b"request-id", whole=True,
    credential=_x_api_key, client_variable="ANTHROPIC_BASE_URL",
    saved_request=answer.saved_request, saved_answer=answer.saved_answer,
    generations=answer.generations, models=models_body, claims=request.anthropic,
    addressed=request.below,
)

COUNT_TOKENS = Family(
    name="count_tokens", kind=COUNT_KIND, path=COUNT_TOKENS_PATH, table=COUNT_TABLE,
    prompt_field="messages", check=request.check_count, prompts=request.count_prompts,
    reply=encode, stream=_no_stream, aggregator=stream_in.MessagesStreamAggregator,
    aggregate=stream_in.aggregate, schema=COUNT_TABLE.schema("messages", _SCHEMA_MESSAGES),
    error_body=error_body, error_schema=SCHEMA, headers=HEADERS, id_header=b"request-id",
    whole=True, credential=_x_api_key, client_variable="ANTHROPIC_BASE_URL",
    saved_request=answer.saved_request, saved_answer=answer.saved_count, models=models_body,
    claims=request.anthropic, counts_tokens=True,
)
ALSO = (COUNT_TOKENS,)
