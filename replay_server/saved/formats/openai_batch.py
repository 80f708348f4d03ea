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
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

from ...errors import LoadError, where_of
from ...wire.families import ENDPOINTS, family_of
from ..record import Record, make_record, strip_transport
from .base import LoadContext, head_keys, json_lines, read_rows

HARNESS = "openai-batch"


@dataclass(slots=True)
class _Line:
    """A line of a batch file: an input (`url`, `body`) or an output (`response`, `error`)."""

    file: str
    line: int
    custom_id: str
    obj: dict[str, Any]

    @property
    def where(self) -> str:
        return where_of(self.file, self.line)

    def fail(self, reason: str, field: str = "custom_id") -> LoadError:
        return LoadError(self.file, self.line, reason, field=field)


class OpenAIBatchReader:
    """OpenAI Batch input and output files, joined on custom_id within a group."""

    name = "openai-batch"
    expects = ('OpenAI Batch input and output files: JSON lines with "custom_id" and "body", '
               '"response" or "error"')

    def detect(self, path: Path, head: bytes) -> bool:
        keys = head_keys(head)
        return "custom_id" in keys and bool(keys & {"body", "response", "error"})

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        inputs: dict[str, _Line] = {}
        outputs: list[_Line] = []
        for path in files:
            for given in read_rows(json_lines(path, ctx), partial(_line, str(path), inputs),
                                   ctx):
                if "body" in given.obj:
                    inputs[given.custom_id] = given
                else:
                    outputs.append(given)
        answered: set[str] = set()
        yield from chain.from_iterable(read_rows(outputs, partial(_join, inputs, answered, ctx),
                                                 ctx))
        unanswered = [given for custom_id, given in inputs.items()
                      if custom_id not in answered and given.obj["url"] in ENDPOINTS]
        yield from chain.from_iterable(read_rows(unanswered, partial(_unanswered, ctx), ctx))


def _line(file: str, inputs: dict[str, _Line], row: tuple[int, Any]) -> _Line:
    """A batch line, checked: an output, or an input whose custom_id is new."""
    line, obj = row
    if not isinstance(obj, dict) or not isinstance(obj.get("custom_id"), str):
        raise LoadError(file, line, "expected an object with a string", field="custom_id")
    given = _Line(file, line, obj["custom_id"], obj)
    if "body" not in obj:
        return given
    if given.custom_id in inputs:
        raise given.fail(f"custom_id {given.custom_id!r} is already used at "
                         f"{inputs[given.custom_id].where}; pass each batch's files as a "
                         "separate argument")
    if not isinstance(obj.get("url"), str) or not isinstance(obj["body"], dict):
        raise given.fail("expected `url` (a string) and `body` (an object)", field="body")
    return given


def _join(inputs: dict[str, _Line], answered: set[str], ctx: LoadContext,
          output: _Line) -> list[Record] | None:
    """The records of an output line, joined to its input line on custom_id."""
    custom_id = output.custom_id
    given = inputs.get(custom_id)
    if given is None:
        raise output.fail(f"custom_id {custom_id!r} has no request in the batch input files "
                          "given with it")
    if custom_id in answered:
        raise output.fail(f"custom_id {custom_id!r} is answered twice")
    answered.add(custom_id)
    url = given.obj["url"]
    if url not in ENDPOINTS:
        ctx.skip(f"endpoint not replayed ({url})", output.where)
        return None
    source = {"file": output.file, "line": output.line, "harness": HARNESS,
              "instance": custom_id, "input": given.where}
    failure = _failure(output.obj)
    if failure is not None:
        ctx.skip("failed batch line", output.where)
    body = None if failure else output.obj["response"].get("body")
    if failure is None and not isinstance(body, dict):
        raise output.fail("expected the response body (an object) of a status 200 line",
                          field="response.body")
    return _records(given, body, source, failure)


def _unanswered(ctx: LoadContext, given: _Line) -> list[Record]:
    """The records of an input line that no output line answers: unusable, not missing."""
    ctx.skip("batch request with no output line", given.where)
    source = {"file": given.file, "line": given.line, "harness": HARNESS,
              "instance": given.custom_id}
    return _records(given, None, source, f"the batch output has no line for custom_id "
                    f"{given.custom_id!r}")


def _records(given: _Line, body: Any, source: dict[str, Any],
             failure: str | None) -> list[Record]:
    """One record per prompt of the input's request (a batched completion is split, its
    parts' usage null: the batch output's usage covers them all, `Family.split`)."""
    file, line = str(source["file"]), int(source["line"])
    url, request = given.obj["url"], strip_transport(given.obj["body"])
    try:
        parts = family_of(url).split(request, body if failure is None else None, "")
    except ValueError as e:
        raise LoadError(file, line, str(e), field="response.body.choices") from None
    return [make_record(url, request.get("model"), part_request, part_body, source, file, line,
                        unusable=failure) for part_request, part_body, _ in parts]


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
