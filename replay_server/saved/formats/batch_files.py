"""Shared reading for batch files: request lines joined to result lines on custom_id.

A batch API's user keeps two files: the requests (one line each, with its `custom_id`) and
the results the API wrote, whose lines arrive in any order and carry no request. The join
is on `custom_id` within one group (one command-line argument, or all file arguments
together); each API's reader (`openai_batch.py`, `anthropic_batch.py`) says only what its
lines hold, as a `BatchFormat`. A result that is no answer (failed, errored, canceled,
expired) and a request no result answers are never served: they are counted, and their
prompts answer `replay_unusable`, saying why, instead of a miss.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

from ...errors import LoadError, where_of
from ...wire.families import ENDPOINTS, family_of
from ..record import Record, make_record, strip_transport
from .base import LoadContext, json_lines, read_rows


@dataclass(slots=True)
class BatchLine:
    """A line of a batch file: a request or a result."""

    file: str
    line: int
    custom_id: str
    obj: dict[str, Any]

    @property
    def where(self) -> str:
        return where_of(self.file, self.line)

    def fail(self, reason: str, field: str = "custom_id") -> LoadError:
        return LoadError(self.file, self.line, reason, field=field)


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """Why a result line answered nothing: `counted`, the reason `inspect` counts it under;
    `why`, what its prompt's `replay_unusable` says."""

    counted: str
    why: str


class BatchFormat(Protocol):
    """What one API's batch lines hold."""

    harness: str

    def is_request(self, obj: dict[str, Any]) -> bool:
        """Whether a line is a request (else a result)."""
        ...

    def check_request(self, given: BatchLine) -> None:
        """Raise `given.fail` for a request line that is not one."""
        ...

    def endpoint(self, given: BatchLine) -> str:
        """The path the request line's request is for."""
        ...

    def request(self, given: BatchLine) -> dict[str, Any]:
        """The request body of a request line."""
        ...

    def answer(self, result: BatchLine) -> Any | NoAnswer:
        """The response body of a result line that answered, or why it did not."""
        ...


def read_batch(fmt: BatchFormat, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
    """The records of one group's batch files: each result joined to its request, then
    each request no result answered, as unusable."""
    inputs: dict[str, BatchLine] = {}
    outputs: list[BatchLine] = []
    for path in files:
        for given in read_rows(json_lines(path, ctx), partial(_line, fmt, str(path), inputs),
                               ctx):
            if fmt.is_request(given.obj):
                inputs[given.custom_id] = given
            else:
                outputs.append(given)
    answered: set[str] = set()
    yield from chain.from_iterable(read_rows(outputs, partial(_join, fmt, inputs, answered, ctx),
                                             ctx))
    unanswered = [given for custom_id, given in inputs.items()
                  if custom_id not in answered and fmt.endpoint(given) in ENDPOINTS]
    yield from chain.from_iterable(read_rows(unanswered, partial(_unanswered, fmt, ctx), ctx))


def _line(fmt: BatchFormat, file: str, inputs: dict[str, BatchLine],
          row: tuple[int, Any]) -> BatchLine:
    """A batch line, checked: a result, or a request whose custom_id is new."""
    line, obj = row
    if not isinstance(obj, dict) or not isinstance(obj.get("custom_id"), str):
        raise LoadError(file, line, "expected an object with a string", field="custom_id")
    given = BatchLine(file, line, obj["custom_id"], obj)
    if not fmt.is_request(obj):
        return given
    if given.custom_id in inputs:
        raise given.fail(f"custom_id {given.custom_id!r} is already used at "
                         f"{inputs[given.custom_id].where}; pass each batch's files as a "
                         "separate argument")
    fmt.check_request(given)
    return given


def _join(fmt: BatchFormat, inputs: dict[str, BatchLine], answered: set[str],
          ctx: LoadContext, output: BatchLine) -> list[Record] | None:
    """The records of a result line, joined to its request line on custom_id."""
    custom_id = output.custom_id
    given = inputs.get(custom_id)
    if given is None:
        raise output.fail(f"custom_id {custom_id!r} has no request in the batch input files "
                          "given with it")
    if custom_id in answered:
        raise output.fail(f"custom_id {custom_id!r} is answered twice")
    answered.add(custom_id)
    url = fmt.endpoint(given)
    if url not in ENDPOINTS:
        ctx.skip(f"endpoint not replayed ({url})", output.where)
        return None
    source = {"file": output.file, "line": output.line, "harness": fmt.harness,
              "instance": custom_id, "input": given.where}
    answer = fmt.answer(output)
    if isinstance(answer, NoAnswer):
        ctx.skip(answer.counted, output.where)
        return _records(fmt, given, None, source, answer.why)
    return _records(fmt, given, answer, source, None)


def _unanswered(fmt: BatchFormat, ctx: LoadContext, given: BatchLine) -> list[Record]:
    """The records of a request line that no result line answers: unusable, not missing."""
    ctx.skip("batch request with no output line", given.where)
    source = {"file": given.file, "line": given.line, "harness": fmt.harness,
              "instance": given.custom_id}
    return _records(fmt, given, None, source, f"the batch output has no line for custom_id "
                    f"{given.custom_id!r}")


def _records(fmt: BatchFormat, given: BatchLine, body: Any, source: dict[str, Any],
             failure: str | None) -> list[Record]:
    """One record per prompt of the request (a batched completion is split, its parts'
    usage null: the batch output's usage covers them all, `Family.split`)."""
    file, line = str(source["file"]), int(source["line"])
    url, request = fmt.endpoint(given), strip_transport(fmt.request(given))
    try:
        parts = family_of(url).split(request, body if failure is None else None, "")
    except ValueError as e:
        raise LoadError(file, line, str(e), field="response.body.choices") from None
    return [make_record(url, request.get("model"), part_request, part_body, source, file, line,
                        unusable=failure) for part_request, part_body, _ in parts]
