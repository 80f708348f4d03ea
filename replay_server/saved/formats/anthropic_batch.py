"""Reader for Anthropic Message Batches: the requests file(s) joined to the results file(s)
on custom_id.

Request line: {"custom_id", "params": {...a Messages request}}, one element of
              `messages.batches.create(requests=[...])` a line, as the API's docs build
              them (a create body kept whole, `{"requests": [...]}`, is one
              `jq -c '.requests[]'` away)
Result line:  {"custom_id", "result": {"type": "succeeded", "message": {...}}}, or a
              result of type `errored` (with its `error`), `canceled` or `expired`: the
              results file downloaded from the batch's `results_url`

Result lines arrive in any order and carry no request, so the join is on `custom_id`
within one group (`batch_files.py`, shared with OpenAI's batches). A result that is not
`succeeded` is never served: it is counted, and its prompt answers `replay_unusable`
saying why (the error's message, or that it was canceled or expired) instead of a miss.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...paths import MESSAGES_PATH
from ..record import Record
from .base import LoadContext, dig, head_keys
from .batch_files import BatchLine, NoAnswer, read_batch

NOT_ANSWERED = {"canceled": "the batch request was canceled",
                "expired": "the batch request expired"}


class AnthropicBatchFormat:
    """What Message Batches lines hold: `params` (request), `result`."""

    harness = "anthropic-batch"

    def is_request(self, obj: dict[str, Any]) -> bool:
        return "params" in obj

    def check_request(self, given: BatchLine) -> None:
        if not isinstance(given.obj["params"], dict):
            raise given.fail("expected `params` (an object): the Messages request",
                             field="params")

    def endpoint(self, given: BatchLine) -> str:
        return MESSAGES_PATH

    def request(self, given: BatchLine) -> dict[str, Any]:
        params: dict[str, Any] = given.obj["params"]
        return params

    def answer(self, result: BatchLine) -> Any | NoAnswer:
        kind = dig(result.obj, "result", "type")
        if kind == "succeeded":
            message = dig(result.obj, "result", "message")
            if not isinstance(message, dict):
                raise result.fail("expected the message (an object) of a succeeded request",
                                  field="result.message")
            return message
        if kind == "errored":
            detail = dig(result.obj, "result", "error", "error", "message")
            return NoAnswer("errored batch request", "the batch request errored"
                            + (f": {detail}" if detail else ""))
        if kind in NOT_ANSWERED:
            return NoAnswer(f"{kind} batch request", NOT_ANSWERED[kind])
        raise result.fail(f"expected succeeded, errored, canceled or expired, got {kind!r}",
                          field="result.type")


class AnthropicBatchReader:
    """Anthropic Message Batches requests and results files, joined on custom_id within a
    group."""

    name = "anthropic-batch"
    expects = ('Anthropic Message Batches requests and results files: JSON lines with '
               '"custom_id" and "params" or "result"')

    def detect(self, path: Path, head: bytes) -> bool:
        keys = head_keys(head)
        return "custom_id" in keys and bool(keys & {"params", "result"})

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        return read_batch(AnthropicBatchFormat(), files, ctx)
