"""OpenAI's Files and Batches APIs: the input file's lines, read with their 1-based numbers
and precise errors (`read_lines`), a batch's create body (`create_fields`), and the
objects and lines the API answers with: the File (`file_object`), the Batch with its
status history and `request_counts` (`batch_object`), the output and error files'
lines (`result_files`), lists (`list_body`).

As the API does, an input file whose lines cannot be read does not stop the upload: the
batch made of it ends `failed`, each bad line named in `errors.data[]` (`code`,
`message`, `line`, `param`). A line that was read is answered or errored on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple
from uuid import uuid4

import orjson

from ...errors import BadRequest
from ...paths import CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH
from ..json_types import type_name
from .job import DAY, Job, Outcome

# The endpoints a batch's lines may go to that a replay answers (the API has more:
# embeddings, moderations, images; a batch of those is refused when it is created).
ENDPOINTS = (CHAT_PATH, COMPLETION_PATH, RESPONSES_PATH)
PURPOSES = ("batch",)  # what an upload may be for here: a batch's input
FILE_DAYS = 30  # a batch file expires 30 days after its upload (the API's default)


class Line(NamedTuple):
    """One request of an input file: its line number, `custom_id`, and `body` as JSON."""

    number: int
    custom_id: str
    body: bytes


def _problem(code: str, message: str, line: int | None, param: str | None = None
             ) -> dict[str, Any]:
    return {"code": code, "message": message, "line": line, "param": param}


def _line(number: int, text: bytes, endpoint: str) -> Line | dict[str, Any]:
    """One input line read, or the problem with it (`errors.data[]`'s shape)."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        return _problem("invalid_json_line", f"this line is not valid JSON: {e}", number)
    if not isinstance(data, dict):
        return _problem("invalid_request", f"a line must be a JSON object, got "
                        f"{type_name(data)}", number)
    custom_id, method, url, body = (data.get(k) for k in ("custom_id", "method", "url",
                                                          "body"))
    if not isinstance(custom_id, str) or not custom_id:
        return _problem("missing_required_parameter", "`custom_id` is missing or not a "
                        "non-empty string", number, "custom_id")
    if method != "POST":
        return _problem("invalid_request", f"`method` must be \"POST\", got "
                        f"{orjson.dumps(method).decode()}", number, "method")
    if url != endpoint:
        return _problem("invalid_request", f"`url` {orjson.dumps(url).decode()} is not the "
                        f"batch's endpoint {endpoint}", number, "url")
    if not isinstance(body, dict):
        return _problem("invalid_request", f"`body` must be a JSON object, got "
                        f"{type_name(body)}", number, "body")
    if body.get("stream") is True:  # (its answer is a line of the output file)
        return _problem("invalid_request", "`body.stream`: a batch's requests cannot "
                        "stream", number, "body.stream")
    return Line(number, custom_id, orjson.dumps(body))


def read_lines(data: bytes, endpoint: str) -> tuple[list[Line], list[dict[str, Any]]]:
    """The requests of an input file, and the problems that fail its batch (every bad
    line, 1-based; a `custom_id` seen before; no request at all). Blank lines are no
    requests."""
    lines: list[Line] = []
    problems: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for number, text in enumerate(data.split(b"\n"), 1):
        if not text.strip():
            continue
        read = _line(number, text, endpoint)
        if not isinstance(read, Line):
            problems.append(read)
        elif read.custom_id in seen:
            problems.append(_problem("duplicate_custom_id", f"`custom_id` "
                                     f"{read.custom_id!r} is also line {seen[read.custom_id]}'s:"
                                     " each request's must be unique", number, "custom_id"))
        else:
            seen[read.custom_id] = number
            lines.append(read)
    if not lines and not problems:
        problems.append(_problem("empty_file", "the input file holds no request", None))
    return lines, problems


def create_fields(data: Any) -> tuple[str, str, str, dict[str, Any] | None]:
    """`POST /v1/batches`'s `input_file_id`, `endpoint`, `completion_window` and
    `metadata`, checked (BadRequest naming the field)."""
    if not isinstance(data, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type_name(data)}")
    for name in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(data.get(name), str):
            raise BadRequest(f"`{name}` is required, a string", param=name)
    if data["endpoint"] not in ENDPOINTS:
        raise BadRequest(f"`endpoint` {data['endpoint']!r}: a replay answers batches of "
                         f"{', '.join(ENDPOINTS)}", param="endpoint")
    if data["completion_window"] != "24h":
        raise BadRequest("`completion_window` must be \"24h\"", param="completion_window")
    metadata = data.get("metadata")
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(v, str) for v in metadata.values())):
        raise BadRequest("`metadata` must be an object of strings", param="metadata")
    return data["input_file_id"], data["endpoint"], "24h", metadata


def file_object(file_id: str, filename: str, size: int, created: int, purpose: str
                ) -> dict[str, Any]:
    """The File object (`status` is deprecated, and always `processed` here)."""
    return {"id": file_id, "object": "file", "bytes": size, "created_at": created,
            "filename": filename, "purpose": purpose, "status": "processed",
            "expires_at": created + FILE_DAYS * DAY, "status_details": None}


def file_deleted(file_id: str) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "deleted": True}


def batch_object(job: Job) -> dict[str, Any]:
    """The Batch, ended at its first poll: `completed`, each stage stamped at its creation
    (validated, in progress, finalizing, completed); or `failed` at validation, its input's
    problems in `errors`."""
    t = job.created
    ok, failed = job.counted()
    ended: dict[str, Any] = {"in_progress_at": t, "finalizing_at": t, "completed_at": t,
                             "failed_at": None}
    if job.problems:
        ended = {"in_progress_at": None, "finalizing_at": None, "completed_at": None,
                 "failed_at": t}
    return {
        "id": job.id, "object": "batch", "endpoint": job.endpoint, "model": None,
        "errors": {"object": "list", "data": job.problems} if job.problems else None,
        "input_file_id": job.input_file_id, "completion_window": job.completion_window,
        "status": "failed" if job.problems else "completed",
        "output_file_id": job.output_file_id, "error_file_id": job.error_file_id,
        "created_at": t, **ended, "expires_at": t + DAY, "expired_at": None,
        "cancelling_at": None, "cancelled_at": None,
        "request_counts": {"total": ok + failed, "completed": ok, "failed": failed},
        "metadata": job.metadata}


def _result_line(outcome: Outcome) -> bytes:
    """An output or error file's line: the reply's (or error's) body embedded as it is."""
    return orjson.dumps({
        "id": f"batch_req_{uuid4().hex}", "custom_id": outcome.custom_id,
        "response": {"status_code": outcome.status, "request_id": outcome.request_id,
                     "body": orjson.Fragment(outcome.body)},
        "error": None}) + b"\n"


def result_files(outcomes: Sequence[Outcome]) -> tuple[bytes, bytes]:
    """The output file (each answered line: status 200, the saved reply's body) and the
    error file (each line that got no saved answer: its error's status and envelope)."""
    ok = b"".join(_result_line(o) for o in outcomes if o.ok)
    errored = b"".join(_result_line(o) for o in outcomes if not o.ok)
    return ok, errored


def list_body(objects: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """A list's page, as `GET /v1/files` and `GET /v1/batches` answer."""
    return {"object": "list", "data": objects,
            "first_id": objects[0]["id"] if objects else None,
            "last_id": objects[-1]["id"] if objects else None, "has_more": has_more}
