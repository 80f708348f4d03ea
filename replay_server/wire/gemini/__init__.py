"""Google's Gemini API (`POST /{version}/models/{model}:generateContent`), as Google serves
it, the Gemini Developer API's paths and Vertex AI's alike.

- `address.py`: the paths (every version, the Vertex AI forms) -> the fields they carry
  (the model, whether it streams, its framing), and whether a request is Google's;
- `fields.py`: the field table (and countTokens'), the request's one form (camelCase,
  `generationConfig`'s fields as fields of their own) and the key's normal forms;
  `request.py`: the checks, the keyed prompts, `candidateCount` as `n`;
- `answer.py`: what a usable saved response (and count) is, and what makes two saved
  candidates the same generation;
- `reply.py`: the saved body, or one assembled from the candidates chosen;
- `stream_in.py`: a stream (server-sent events or a JSON array) -> the response a plain
  request gets; `stream_out.py`: the chunks Google sends for a saved response, and the
  framing the request asks for;
- `envelope.py`: Google's error envelope; `models.py`: its model list and model.

A reply is the saved response as it was (candidates with their parts verbatim, thought
parts and `thoughtSignature`s included, `finishReason`, safety ratings, `usageMetadata`,
`modelVersion`, `responseId`). `COUNT` answers `:countTokens` with the saved count, keyed
by the same prompt fields (its own kind: a count is no generation of the same prompt).
"""

from ...paths import GEMINI_COUNT_PATH, GEMINI_PATH
from ..family import Family
from . import address, answer, reply, request, stream_in, stream_out
from .difference import difference
from .envelope import SCHEMA, error_body
from .fields import COUNT_KIND, COUNT_TABLE, KIND, TABLE
from .models import model_body, models_body

PROBE = ("GET", "/v1beta/models")  # any server of the API answers it (a 403 without a key)
_SCHEMA_CONTENTS = {"contents": {"type": "array", "minItems": 1, "items": {"type": "object"}}}


def _x_goog_api_key(key: str) -> tuple[str, str]:
    """Google's APIs read an API key from `x-goog-api-key` (a Bearer token is an OAuth
    token there, not a key)."""
    return "x-goog-api-key", key


def _no_stream(selections: object, include_usage: bool) -> bytes:
    raise AssertionError("countTokens does not stream: no path streams it")


def _count_schema() -> dict[str, object]:
    """countTokens' body: `contents`, or a whole request in `generateContentRequest`."""
    schema = COUNT_TABLE.schema("contents", _SCHEMA_CONTENTS)
    del schema["required"]
    return {**schema, "oneOf": [{"required": ["contents"]},
                                {"required": ["generateContentRequest"]}]}


FAMILY = Family(
    name="gemini", kind=KIND, path=GEMINI_PATH, table=TABLE, prompt_field="contents",
    check=request.check, prompts=request.prompts, options=request.options,
    reply=reply.encode, stream=stream_out.stream, framed=stream_out.framed,
    aggregator=stream_in.GeminiStreamAggregator, aggregate=stream_in.aggregate,
    unfinished=answer.unfinished, route=address.generate_fields,
    schema=TABLE.schema("contents", _SCHEMA_CONTENTS), saved_request=answer.saved_request,
    saved_answer=answer.saved_answer, samples=answer.samples,
    generations=answer.generations, error_body=error_body, error_schema=SCHEMA,
    credential=_x_goog_api_key, client_variable="GOOGLE_GEMINI_BASE_URL",
    models=models_body, model=model_body, claims=address.google,
    addressed=address.addressed, probe=PROBE, difference=difference,
)

COUNT = Family(
    name="gemini_count", kind=COUNT_KIND, path=GEMINI_COUNT_PATH, table=COUNT_TABLE,
    prompt_field="contents", check=request.check_count, prompts=request.count_prompts,
    reply=reply.encode, stream=_no_stream, aggregator=stream_in.GeminiStreamAggregator,
    aggregate=stream_in.aggregate, route=address.count_fields, schema=_count_schema(),
    saved_request=answer.saved_request, saved_answer=answer.saved_count, whole=True,
    error_body=error_body, error_schema=SCHEMA, credential=_x_goog_api_key,
    client_variable="GOOGLE_GEMINI_BASE_URL", models=models_body, model=model_body,
    claims=address.google, addressed=address.addressed, probe=PROBE, difference=difference,
    counts_tokens=True,
)
ALSO = (COUNT,)
