"""The OpenAI completions API (`POST /v1/completions`), as vLLM serves it: a prompt of
text or token ids, or a batch of them."""

from ...paths import COMPLETION_PATH
from ..choices import answer as choices
from ..choices import reply
from ..choices.request import options
from ..choices.stream_in import aggregate, carries_usage, unfinished
from ..family import Family
from . import answer, request, stream_in
from .fields import KIND, TABLE
from .stream_out import STREAM

_TOKENS = {"type": "array", "minItems": 1, "items": {"type": "integer"}}

FAMILY = Family(
    name="completions", kind=KIND, path=COMPLETION_PATH, table=TABLE, prompt_field="prompt",
    check=request.check, prompts=request.prompts, options=options, reply=reply.encode,
    stream=STREAM.stream, aggregator=stream_in.aggregator,
    aggregate=lambda stream: aggregate(stream_in.aggregator(), stream),
    unfinished=lambda data, body: unfinished(body, request.choices_asked(data)),
    carries_usage=carries_usage, batched=True, split=answer.split,
    saved_request=answer.saved_request, saved_answer=answer.saved_answer,
    samples=choices.samples, generations=choices.generations,
    schema=TABLE.schema("prompt", {
        "n": {"minimum": 1},
        "stream_options": {"properties": {"include_usage": {"type": "boolean"}}},
        "prompt": {"anyOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "items": {"type": "string"}},
            _TOKENS,
            {"type": "array", "minItems": 1, "items": _TOKENS},
        ]},
    }),
)
