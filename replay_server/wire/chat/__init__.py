"""The OpenAI chat completions API (`POST /v1/chat/completions`), as vLLM serves it."""

from ...paths import CHAT_PATH
from ..choices import answer as choices
from ..choices import reply
from ..choices.request import n_asked, options
from ..choices.stream_in import aggregate, carries_usage, unfinished
from ..family import Family
from . import answer, request, stream_in
from .fields import KIND, TABLE
from .stream_out import STREAM

FAMILY = Family(
    name="chat", kind=KIND, path=CHAT_PATH, table=TABLE, prompt_field="messages",
    check=request.check, prompts=request.prompts, options=options, reply=reply.encode,
    stream=STREAM.stream, aggregator=stream_in.aggregator,
    aggregate=lambda stream: aggregate(stream_in.aggregator(), stream),
    unfinished=lambda data, body: unfinished(body, n_asked(data)),
    carries_usage=carries_usage, saved_request=answer.saved_request,
    saved_answer=answer.saved_answer, samples=choices.samples,
    generations=choices.generations,
    schema=TABLE.schema("messages", {
        "n": {"minimum": 1},
        "stream_options": {"properties": {"include_usage": {"type": "boolean"}}},
        "messages": {"minItems": 1, "items": {
            "type": "object", "required": ["role"], "properties": {"role": {"type": "string"}}}},
    }),
    # the openai client's line `serve` prints, the request body its argument as curl's is
    client_line=("import json, sys; from openai import OpenAI; "
                 'client = OpenAI(base_url="{base_url}", api_key="replay"); '
                 "r = client.chat.completions.create(**json.loads(sys.argv[1])); "
                 "print(r.choices[0].message.content)"),
)
