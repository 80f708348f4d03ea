"""The OpenAI Responses API (`POST /v1/responses`): its stream, its key. Pure functions.

- `ResponsesStreamAggregator` / `aggregate`: a Responses SSE stream, fed as it arrives, ->
  the final response body (the `response` of `response.completed`, checked against the
  deltas), the event payloads and the raw frames (for a byte-faithful replay);
- `events_for`: the SSE frames a server sends for a saved non-streamed response, the text
  and arguments cut into token-sized deltas (`split_deltas`); `stream_for`, them joined;
- `keyed_input`: the part of a Responses request that belongs in the replay key, with the
  field table `FIELDS` (the same roles as `keys.FIELDS`: key, strict, ignored).

Wire format (openai-python's `types/responses`, vLLM's `entrypoints/openai/responses`):
every event is `event: <type>` + `data: <json>` with a `type` and an increasing
`sequence_number` (from 0); no `data: [DONE]` at the end (one is tolerated). A stream
opens with `response.created` and `response.in_progress` (the response with `status:
"in_progress"`, no output, no usage); each output item is `response.output_item.added`
(`output_index`, the item without its text), its parts and deltas (`item_id`,
`output_index`, `content_index` or `summary_index`), then `response.output_item.done`
(the whole item); the stream ends with `response.completed` (the whole response with
`usage`), or `response.incomplete` / `response.failed` (OpenAI), or an `error` event.
"""

from .fields import (
    FIELDS,
    FIELDS_BY_NAME,
    KEY_VERSION,
    RESPONSES,
    NeedsPrevious,
    input_items,
    keyed_input,
    markdown_table,
    output_items,
    previous_of,
    sampling_params,
)
from .stream_in import (
    Aggregated,
    ResponsesStreamAggregator,
    ResponsesStreamError,
    aggregate,
    check_stream,
)
from .stream_out import (
    PIECE,
    event_payloads,
    events_for,
    first_piece,
    frame,
    joined_deltas,
    split_deltas,
    stream_for,
)

__all__ = ["FIELDS", "FIELDS_BY_NAME", "KEY_VERSION", "RESPONSES",
           "Aggregated", "NeedsPrevious", "ResponsesStreamAggregator", "ResponsesStreamError",
           "aggregate", "check_stream", "event_payloads", "events_for", "frame",
           "input_items", "keyed_input", "markdown_table", "output_items", "previous_of",
           "sampling_params", "split_deltas", "PIECE", "first_piece", "joined_deltas", "stream_for"]
