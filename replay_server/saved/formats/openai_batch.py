"""Reader for OpenAI Batch files: the input file(s) joined to the output file(s) on custom_id.

Input line:  {"custom_id", "method", "url", "body"}
Output line: {"id", "custom_id", "response": {"status_code", "body"} | null, "error": ... | null}

Output lines arrive in any order and carry no request, so the join is on `custom_id`
within one group (one command-line argument, or all file arguments together). A failed
line (an `error`, or a status other than 200) is never served: it is counted, and its
prompt answers `replay_unusable` instead of a miss.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import LoadError, where_of
from ...paths import COMPLETION_PATH, ENDPOINTS
from ...wire.keys import split_prompts
from ..record import Record, make_record, split_batch, strip_transport
from .base import LoadContext, head_keys, json_lines

HARNESS = "openai-batch"


@dataclass(slots=True)
class _Input:
    file: str
    line: int
    url: str
    body: dict[str, Any]

    @property
    def where(self) -> str:
        return where_of(self.file, self.line)


class OpenAIBatchReader:
    name = "openai-batch"

    def detect(self, path: Path, head: bytes) -> bool:
        keys = head_keys(head)
        return "custom_id" in keys and bool(keys & {"body", "response", "error"})

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        inputs: dict[str, _Input] = {}
        outputs: list[tuple[str, int, dict[str, Any]]] = []
        for path in files:
            for line, obj in self._lines(path, ctx):
                if "body" in obj:
                    self._add_input(inputs, obj, str(path), line, ctx)
                else:
                    outputs.append((str(path), line, obj))
        answered: set[str] = set()
        for file, line, obj in outputs:
            yield from self._join(inputs, answered, file, line, obj, ctx)
        for custom_id, given in inputs.items():
            if custom_id not in answered and given.url in ENDPOINTS:
                ctx.skip("batch request with no output line", given.where)
                source = {"file": given.file, "line": given.line, "harness": HARNESS,
                          "instance": custom_id}
                failure = f"the batch output has no line for custom_id {custom_id!r}"
                yield from self._records(given, None, source, failure, ctx)

    def _lines(self, path: Path, ctx: LoadContext) -> Iterator[tuple[int, dict[str, Any]]]:
        for line, obj in json_lines(path, ctx):
            if isinstance(obj, dict) and isinstance(obj.get("custom_id"), str):
                yield line, obj
            else:
                ctx.bad(LoadError(str(path), line, "expected an object with a string",
                                  field="custom_id"))

    def _add_input(self, inputs: dict[str, _Input], obj: dict[str, Any], file: str, line: int,
                   ctx: LoadContext) -> None:
        custom_id = obj["custom_id"]
        if custom_id in inputs:
            ctx.bad(LoadError(file, line, f"custom_id {custom_id!r} is already used at "
                              f"{inputs[custom_id].where}; pass each batch's files as a "
                              "separate argument", field="custom_id"))
            return
        url, body = obj.get("url"), obj.get("body")
        if not isinstance(url, str) or not isinstance(body, dict):
            ctx.bad(LoadError(file, line, "expected `url` (a string) and `body` (an object)",
                              field="body"))
            return
        inputs[custom_id] = _Input(file, line, url, body)

    def _join(self, inputs: dict[str, _Input], answered: set[str], file: str, line: int,
              obj: dict[str, Any], ctx: LoadContext) -> Iterator[Record]:
        custom_id = obj["custom_id"]
        given = inputs.get(custom_id)
        if given is None:
            ctx.bad(LoadError(file, line, f"custom_id {custom_id!r} has no request in the batch "
                              "input files given with it", field="custom_id"))
            return
        if custom_id in answered:
            ctx.bad(LoadError(file, line, f"custom_id {custom_id!r} is answered twice",
                              field="custom_id"))
            return
        answered.add(custom_id)
        where = where_of(file, line)
        if given.url not in ENDPOINTS:
            ctx.skip(f"endpoint not replayed ({given.url})", where)
            return
        source = {"file": file, "line": line, "harness": HARNESS, "instance": custom_id,
                  "input": given.where}
        failure = _failure(obj)
        if failure is not None:
            ctx.skip("failed batch line", where)
        body = None if failure else obj["response"]["body"]
        yield from self._records(given, body, source, failure, ctx)

    def _records(self, given: _Input, body: Any, source: dict[str, Any],
                 failure: str | None, ctx: LoadContext) -> Iterator[Record]:
        file, line = str(source["file"]), int(source["line"])
        request = strip_transport(given.body)
        try:
            parts: list[tuple[dict[str, Any], dict[str, Any] | None]]
            if failure is not None:
                parts = [(r, None) for r in _split_requests(request)]
            elif given.url == COMPLETION_PATH and isinstance(body, dict):
                parts = list(split_batch(request, body))
            else:
                parts = [(request, body)]
            for part_request, part_body in parts:
                yield make_record(given.url, request.get("model"), part_request, part_body,
                                  source, file, line, unusable=failure)
        except ValueError as e:
            ctx.bad(LoadError(file, line, str(e), field="response.body.choices"))
        except LoadError as error:
            ctx.bad(error)


def _split_requests(request: dict[str, Any]) -> list[dict[str, Any]]:
    prompts = split_prompts(request.get("prompt")) if "prompt" in request else None
    if prompts is None or len(prompts) == 1:
        return [request]
    return [{**request, "prompt": p} for p in prompts]


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
