"""Reader for OpenAI Batch files: the input file(s) joined to the output file(s) on custom_id.

Input line:  {"custom_id", "method", "url", "body"}
Output line: {"id", "custom_id", "response": {"status_code", "body"} | null, "error": ... | null}

Output lines arrive in any order and carry no request, so the join is on `custom_id`
within one group (`batch_files.py`, shared with Anthropic's batches). A failed line (an
`error`, or a status other than 200) is never served: it is counted, and its prompt answers
`replay_unusable` instead of a miss.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..record import Record
from .base import LoadContext, head_keys
from .batch_files import BatchLine, NoAnswer, read_batch


class OpenAIBatchFormat:
    """What OpenAI Batch lines hold: `url` and `body` (input), `response` or `error`."""

    harness = "openai-batch"

    def is_request(self, obj: dict[str, Any]) -> bool:
        return "body" in obj

    def check_request(self, given: BatchLine) -> None:
        if not isinstance(given.obj.get("url"), str) or not isinstance(given.obj["body"], dict):
            raise given.fail("expected `url` (a string) and `body` (an object)", field="body")

    def endpoint(self, given: BatchLine) -> str:
        return str(given.obj["url"])

    def request(self, given: BatchLine) -> dict[str, Any]:
        body: dict[str, Any] = given.obj["body"]
        return body

    def answer(self, result: BatchLine) -> Any | NoAnswer:
        failure = _failure(result.obj)
        if failure is not None:
            return NoAnswer("failed batch line", failure)
        body = result.obj["response"].get("body")
        if not isinstance(body, dict):
            raise result.fail("expected the response body (an object) of a status 200 line",
                              field="response.body")
        return body


class OpenAIBatchReader:
    """OpenAI Batch input and output files, joined on custom_id within a group."""

    name = "openai-batch"
    expects = ('OpenAI Batch input and output files: JSON lines with "custom_id" and "body", '
               '"response" or "error"')

    def detect(self, path: Path, head: bytes) -> bool:
        keys = head_keys(head)
        return "custom_id" in keys and bool(keys & {"body", "response", "error"})

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        return read_batch(OpenAIBatchFormat(), files, ctx)


def _failure(obj: dict[str, Any]) -> str | None:
    error, response = obj.get("error"), obj.get("response")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        return f"the batch line failed: {message}"
    if not isinstance(response, dict):
        return "the batch line has no response"
    status = response.get("status_code")
    if status != 200:
        body = response.get("body")
        detail = body.get("error", {}).get("message") if isinstance(body, dict) else None
        return f"the batch line failed with status {status}" + (f": {detail}" if detail else "")
    return None
