"""Anthropic's Message Batches API: a create body's requests, checked with the place of
each problem (`requests_of`), and what the API answers with: the `message_batch`
(`batch_object`), its results' lines, `succeeded` with the message or `errored` with the
error (`result_line`), a deletion (`batch_deleted`) and a list's page (`list_body`).

As the API does, a create body it cannot take is refused whole (400, naming
`requests.N.FIELD`): each request's `params` must be a Messages request that does not
stream (a batch's answers are results, never streams).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ...errors import BadRequest
from ...paths import MESSAGES_PATH
from ..json_types import type_name
from .job import DAY, Job, Outcome, rfc3339

ENDPOINT = MESSAGES_PATH  # where each request of a batch goes
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _request(i: int, item: Any) -> tuple[str, bytes]:
    """One request's `custom_id` and `params` (as a Messages request body)."""
    where = f"requests.{i}"
    if not isinstance(item, dict):
        raise BadRequest(f"{where}: must be an object, got {type_name(item)}", param=where)
    custom_id, params = item.get("custom_id"), item.get("params")
    if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
        raise BadRequest(f"{where}.custom_id: required, 1 to 64 letters, digits, `_` or "
                         "`-`", param=f"{where}.custom_id")
    if not isinstance(params, dict):
        raise BadRequest(f"{where}.params: required, an object (a Messages request), got "
                         f"{type_name(params)}", param=f"{where}.params")
    if params.get("stream") is True:
        raise BadRequest(f"{where}.params.stream: a batch's requests cannot stream",
                         param=f"{where}.params.stream")
    return custom_id, orjson.dumps(params)


def requests_of(data: Any) -> list[tuple[str, bytes]]:
    """The requests of `POST /v1/messages/batches`, in order: `custom_id` and `params`;
    BadRequest naming the first problem (`requests.3.custom_id`)."""
    if not isinstance(data, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type_name(data)}")
    items = data.get("requests")
    if not isinstance(items, list) or not items:
        raise BadRequest("requests: required, a non-empty array", param="requests")
    found: dict[str, int] = {}
    out = []
    for i, item in enumerate(items):
        custom_id, params = _request(i, item)
        if custom_id in found:
            raise BadRequest(f"requests.{i}.custom_id: {custom_id!r} is also requests."
                             f"{found[custom_id]}'s; each must be unique",
                             param=f"requests.{i}.custom_id")
        found[custom_id] = i
        out.append((custom_id, params))
    return out


def batch_object(job: Job, base: str) -> dict[str, Any]:
    """The `message_batch`, ended at its first poll; its results at the server's root URL
    `base` (the SDK follows `results_url` as it is, as the API gives it: absolute)."""
    ok, errored = job.counted()
    return {
        "id": job.id, "type": "message_batch", "processing_status": "ended",
        "request_counts": {"processing": 0, "succeeded": ok, "errored": errored,
                           "canceled": 0, "expired": 0},
        "ended_at": rfc3339(job.created), "created_at": rfc3339(job.created),
        "expires_at": rfc3339(job.created + DAY), "archived_at": None,
        "cancel_initiated_at": None,
        "results_url": f"{base.rstrip('/')}{ENDPOINT}/batches/{job.id}/results"}


def result_line(outcome: Outcome) -> bytes:
    """A results line: the saved message as it is replayed, or the error in Anthropic's
    envelope (never an invented message)."""
    result = {"type": "succeeded", "message": orjson.Fragment(outcome.body)} if outcome.ok \
        else {"type": "errored", "error": orjson.Fragment(outcome.body)}
    return orjson.dumps({"custom_id": outcome.custom_id, "result": result}) + b"\n"


def batch_deleted(batch_id: str) -> dict[str, Any]:
    return {"id": batch_id, "type": "message_batch_deleted"}


def list_body(objects: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """A list's page, as `GET /v1/messages/batches` answers."""
    return {"data": objects, "has_more": has_more,
            "first_id": objects[0]["id"] if objects else None,
            "last_id": objects[-1]["id"] if objects else None}
