"""Anthropic's Message Batches API over the store: create (every request answered at
once), retrieve, list, results, cancel and delete. Each call returns the API's object
(`wire/batches/anthropic.py`) or raises the error the API would (404 for an id it does
not hold; 400 naming `requests.N.FIELD` for a create body it cannot take, which runs
none of its requests).

`results_url` is this server's own address as the client reached it (`base`): the SDK
follows it as it is.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ...errors import BadRequest
from ...wire.batches import anthropic as wire
from ...wire.batches.job import Job, page
from .store import Store, new_id

PREFIX = "msgbatch_"


class AnthropicBatches:
    def __init__(self, store: Store) -> None:
        self.store = store

    def _object(self, job: Job, base: str) -> dict[str, Any]:
        return wire.batch_object(job, base)

    def create(self, body: bytes, headers: list[tuple[bytes, bytes]], base: str
               ) -> dict[str, Any]:
        """Every request answered as a Messages request sent alone with these headers
        (the create request's: `anthropic-beta` applies to each, as it does upstream)."""
        self.store.check_size(len(body))
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise BadRequest(f"the request body is not valid JSON: {e}") from None
        requests = wire.requests_of(data)
        job = self.store.add_job(Job(new_id(PREFIX), int(time.time()), wire.ENDPOINT, []),
                                 PREFIX)
        job.outcomes = self.store.answer(wire.ENDPOINT, requests, headers)
        return self._object(job, base)

    def batch(self, batch_id: str, base: str) -> dict[str, Any]:
        return self._object(self.store.job(batch_id, PREFIX, "message_batch_id"), base)

    def results(self, batch_id: str) -> bytes:
        job = self.store.job(batch_id, PREFIX, "message_batch_id")
        return b"".join(wire.result_line(o) for o in job.outcomes)

    def cancel(self, batch_id: str, base: str) -> dict[str, Any]:
        """A batch has ended by the time it can be cancelled: answered as it is."""
        return self.batch(batch_id, base)

    def delete(self, batch_id: str) -> dict[str, Any]:
        job = self.store.job(batch_id, PREFIX, "message_batch_id")
        del self.store.jobs[job.id]
        return wire.batch_deleted(job.id)

    def batches(self, before: str | None, after: str | None, limit: int | None, base: str
                ) -> dict[str, Any]:
        if limit is not None and not 1 <= limit <= 1000:
            raise BadRequest("`limit` must be from 1 to 1000", param="limit")
        jobs = self.store.newest(PREFIX)
        found, more = page(jobs, [j.id for j in jobs], limit or 20, after, before)
        return wire.list_body([self._object(j, base) for j in found], more)
