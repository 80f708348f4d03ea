"""OpenAI's Files and Batches APIs over the store: upload, list, retrieve, download and
delete files; create, retrieve, list and cancel batches. Each call returns the API's
object (`wire/batches/openai.py`), or raises the error the API would (404 for an id it
does not hold, 400 naming the field of a bad create body, 413 past a cap).

A batch is created from an uploaded file: its lines are read (a bad one fails the batch,
`errors.data[].line`, and counts as a request that got no saved generation), then every
line is answered (`Store.answer`), the answers going to the output file and the errors to
the error file. It has ended when `create` returns.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ...errors import BadRequest
from ...wire.batches import openai as wire
from ...wire.batches.job import Job, page
from .store import Store, StoredFile, new_id

PREFIX = "batch_"


def _file(stored: StoredFile) -> dict[str, Any]:
    return wire.file_object(stored.id, stored.filename, len(stored.data), stored.created,
                            stored.purpose)


def _limit(limit: int | None, default: int, most: int) -> int:
    if limit is None:
        return default
    if not 1 <= limit <= most:
        raise BadRequest(f"`limit` must be from 1 to {most}", param="limit")
    return limit


class OpenAIBatches:
    def __init__(self, store: Store) -> None:
        self.store = store

    def upload(self, filename: str, purpose: str, data: bytes) -> dict[str, Any]:
        if purpose not in wire.PURPOSES:
            raise BadRequest(f"`purpose` {purpose!r}: this server keeps files for "
                             f"{', '.join(wire.PURPOSES)} only", param="purpose")
        return _file(self.store.add_file(filename, purpose, data))

    def file(self, file_id: str) -> dict[str, Any]:
        return _file(self.store.file(file_id))

    def content(self, file_id: str) -> bytes:
        return self.store.file(file_id).data

    def delete(self, file_id: str) -> dict[str, Any]:
        self.store.delete_file(file_id)
        return wire.file_deleted(file_id)

    def files(self, after: str | None, limit: int | None, order: str, purpose: str | None
              ) -> dict[str, Any]:
        if order not in ("asc", "desc"):
            raise BadRequest("`order` must be \"asc\" or \"desc\"", param="order")
        held = [f for f in self.store.files.values() if purpose in (None, f.purpose)]
        if order == "desc":
            held.reverse()
        found, more = page(held, [f.id for f in held], _limit(limit, 10000, 10000), after)
        return wire.list_body([_file(f) for f in found], more)

    def create(self, body: bytes) -> dict[str, Any]:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise BadRequest(f"the request body is not valid JSON: {e}") from None
        file_id, endpoint, window, metadata = wire.create_fields(data)
        source = self.store.file(file_id)
        job = Job(new_id(PREFIX), int(time.time()), endpoint, [], input_file_id=file_id,
                  metadata=metadata, completion_window=window)
        self.store.add_job(job, PREFIX)
        lines, job.problems = wire.read_lines(source.data, endpoint)
        if job.problems:
            first = job.problems[0]
            self.store.refuse(endpoint, f"batch {job.id} failed: its input file {file_id} "
                              f"line {first['line']}: {first['message']}")
            return wire.batch_object(job)
        job.outcomes = self.store.answer(endpoint, ((ln.custom_id, ln.body) for ln in lines),
                                         [])
        self._files(job)
        return wire.batch_object(job)

    def _files(self, job: Job) -> None:
        """The output file (if a line was answered) and the error file (if one was not)."""
        output, errored = wire.result_files(job.outcomes)
        if output:
            job.output_file_id = self.store.add_file(
                f"batch_{job.id}_output.jsonl", "batch_output", output, output=True).id
        if errored:
            job.error_file_id = self.store.add_file(
                f"batch_{job.id}_error.jsonl", "batch_output", errored, output=True).id

    def batch(self, batch_id: str) -> dict[str, Any]:
        return wire.batch_object(self.store.job(batch_id, PREFIX, "batch_id"))

    def cancel(self, batch_id: str) -> dict[str, Any]:
        """A batch has ended by the time it can be cancelled: answered as it is."""
        return self.batch(batch_id)

    def batches(self, after: str | None, limit: int | None) -> dict[str, Any]:
        jobs = self.store.newest(PREFIX)
        found, more = page(jobs, [j.id for j in jobs], _limit(limit, 20, 100), after)
        return wire.list_body([wire.batch_object(j) for j in found], more)

