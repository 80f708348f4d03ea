"""What the batch APIs keep, in the serving process only, and the one way a batch's lines
are answered (`Store.answer`).

Uploaded files, the batches and their output files live in memory until deleted or until
the server stops; nothing is written to disk. Two caps keep that bounded: no upload (an
input file, a create body) over `max_upload` bytes, and no more than `max_held` files
and `max_held` batches at once (413 past either, saying what to do).

Each line is one request to its endpoint: counted as it begins (`Stats.requests`), then
answered by `Replayer.handle`, which keys it, chooses its samples, makes the reply, counts
the hit or the error and logs a miss, as for a request sent alone. A line that cannot be
replayed becomes its error (status and envelope in its API's shape), never a body.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar
from uuid import uuid4

from ... import errors
from ...errors import BadRequest, NotFound, PayloadTooLarge, ReplayServerError
from ...wire.batches.job import Job, Outcome
from ...wire.families import family_of
from ..replayer import Replayer

T = TypeVar("T")


@dataclass(slots=True)
class StoredFile:
    """A file of the Files API: an upload, or a batch's output or error file."""

    id: str
    filename: str
    purpose: str
    created: int
    data: bytes
    output: bool = False  # a batch's output or error file (not an upload: not capped)


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid4().hex}"


class Store:
    """The files and batches of one serving process, and the replayer that answers them."""

    def __init__(self, replayer: Replayer, max_upload: int, max_held: int) -> None:
        self.replayer = replayer
        self.max_upload = max_upload
        self.max_held = max_held
        self.files: dict[str, StoredFile] = {}
        self.jobs: dict[str, Job] = {}

    def check_size(self, size: int) -> None:
        """PayloadTooLarge for an upload of `size` bytes over the cap."""
        if size > self.max_upload:
            raise PayloadTooLarge(f"the upload has {size} bytes or more; this server keeps "
                                  f"uploads of at most {self.max_upload} bytes in memory "
                                  "(--max-upload-size): split the batch")

    def _room(self, held: Sequence[object], what: str, free: str) -> None:
        """PayloadTooLarge past --max-batches, saying what frees room (`free`)."""
        if len(held) >= self.max_held:
            raise PayloadTooLarge(f"this server already keeps {self.max_held} {what} in "
                                  f"memory (--max-batches): {free}")

    def add_file(self, filename: str, purpose: str, data: bytes, output: bool = False
                 ) -> StoredFile:
        """Keep a file (an upload is checked against both caps; a batch's own output file
        is part of its batch, and is not)."""
        if not output:
            self.check_size(len(data))
            self._room([f for f in self.files.values() if not f.output], "files",
                       "delete those it no longer needs (DELETE /v1/files/{id})")
        stored = StoredFile(new_id("file-"), filename, purpose, int(time.time()), data,
                            output)
        self.files[stored.id] = stored
        return stored

    def file(self, file_id: str) -> StoredFile:
        found = self.files.get(file_id)
        if found is None:
            raise NotFound(f"No such File object: {file_id}", param="file_id")
        return found

    def delete_file(self, file_id: str) -> None:
        self.file(file_id)
        del self.files[file_id]

    def add_job(self, job: Job, prefix: str, free: str) -> Job:
        """Keep a batch of the API whose ids begin with `prefix` (capped per API; `free`:
        what frees room in that API)."""
        self._room(self.newest(prefix), "batches", free)
        self.jobs[job.id] = job
        return job

    def job(self, job_id: str, prefix: str, param: str) -> Job:
        """The batch of this id, of the API whose ids begin with `prefix`."""
        found = self.jobs.get(job_id) if job_id.startswith(prefix) else None
        if found is None:
            raise NotFound(f"No batch found with id '{job_id}'", param=param)
        return found

    def newest(self, prefix: str) -> list[Job]:
        """The batches of one API, newest first (as both APIs list them)."""
        return [j for j in reversed(self.jobs.values()) if j.id.startswith(prefix)]

    def answer(self, endpoint: str, lines: Iterable[tuple[str, bytes]],
               headers: list[tuple[bytes, bytes]]) -> list[Outcome]:
        """Each line (`custom_id`, body) answered as a request to `endpoint` alone would
        be, in order; `headers`, the create request's (a family that reads some:
        Anthropic's `anthropic-beta`)."""
        family = family_of(endpoint)
        outcomes = []
        for custom_id, body in lines:
            request_id = new_id("req_")
            self.replayer.begun()  # (as a request sent alone is counted, when it begins)
            try:
                reply = self.replayer.handle(endpoint, body, headers)
            except ReplayServerError as error:  # (counted and logged by the replayer)
                status, _, data = errors.render(error, family.error_body)
                outcomes.append(Outcome(custom_id, status, data, request_id))
                continue
            outcomes.append(Outcome(custom_id, 200, reply.body, request_id))
        return outcomes

    def refuse(self, endpoint: str, why: str) -> None:
        """Count a batch that ran none of its lines (its input refused whole) as a request
        that got no saved generation: `run` fails on it, whatever the harness does with a
        failed batch."""
        self.replayer.begun()
        self.replayer.count(None, endpoint, BadRequest(why))
