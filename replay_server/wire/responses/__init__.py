"""The OpenAI Responses API (`POST /v1/responses`), as OpenAI and vLLM serve it.

- `fields.py`: the field table and the normal forms of input items; `request.py`: the
  keyed prompt (`keyed_input`) and the conversation a later turn continues (`previous_of`:
  a request with `previous_response_id` is keyed by what the saved response of that id
  holds, never by the id);
- `answer.py`: what a usable saved response is (not failed, not saved before it was
  done), and what makes two saved responses the same generation;
- `stream_in.py`: a Responses SSE stream, fed as it arrives, -> the final response body
  (the `response` of `response.completed`, checked against the deltas), the event payloads
  and the raw frames (for a byte-faithful replay);
- `stream_out.py`: the SSE frames a server sends for a saved non-streamed response, the
  text and arguments cut into token-sized deltas.

Wire format (openai-python's `types/responses`, vLLM's `entrypoints/openai/responses`):
every event is `event: <type>` + `data: <json>` with a `type` and an increasing
`sequence_number` (from 0); no `data: [DONE]` at the end (one is tolerated). A stream
opens with `response.created` and `response.in_progress` (the response with `status:
"in_progress"`, no output, no usage); each output item is `response.output_item.added`
(`output_index`, the item without its text), its parts and deltas (`item_id`,
`output_index`, `content_index` or `summary_index`), then `response.output_item.done`
(the whole item); the stream ends with `response.completed` (the whole response with
`usage`), or `response.incomplete` / `response.failed` (OpenAI), or an `error` event.
A Responses request has no `n`: one saved response answers it, whole.
"""

from ...paths import RESPONSES_PATH
from ..family import Family
from ..selection import encode
from . import answer, request, stream_in, stream_out
from .fields import KIND, TABLE

FAMILY = Family(
    name="responses", kind=KIND, path=RESPONSES_PATH, table=TABLE, prompt_field="input",
    check=request.check, prompts=request.prompts, reply=encode, stream=stream_out.stream,
    aggregator=stream_in.ResponsesStreamAggregator,
    aggregate=lambda stream: stream_in.aggregate(stream).response,
    chained=True, whole=True, previous_id=request.previous_id, previous_of=request.previous_of,
    saved_request=answer.saved_request, saved_answer=answer.saved_answer,
    generations=answer.generations,
    schema=TABLE.schema("input", {"input": {"anyOf": [
        {"type": "string"}, {"type": "array", "items": {"type": "object"}}]}}),
)
