"""Anthropic's Message Batches API on the fake model, as the anthropic SDK
(`messages.batches.create`, `retrieve`, `results`, `list`, `cancel`, `delete`) and
inspect_ai's `--batch` call it.

Routes: `POST /v1/messages/batches` (`{"requests": [{"custom_id", "params"}]}`),
`GET /v1/messages/batches` (`limit`, `after_id`, `before_id`), `GET`/`DELETE
/v1/messages/batches/{id}`, `GET /v1/messages/batches/{id}/results` (JSONL),
`POST /v1/messages/batches/{id}/cancel`. Batches live in the process.

A batch is `in_progress` at create and at the first retrieve; the second retrieve answers
its requests, each by the fake's `POST /v1/messages` (batch_jobs.py), and ends it: `ended`,
`request_counts` filled, `results_url` (absolute, on the server the client called) set.
A result line is `{"custom_id", "result": {"type": "succeeded", "message"}}`, or `errored`
with the route's error body (`{"type": "error", "error": {"type", "message"}}`). A cancel
before the end goes `canceling`, then `ended` with every request `canceled`. A malformed
create (no requests, a custom_id that is not 1-64 of `[A-Za-z0-9_-]` or is used twice,
params not an object) is refused whole, a 400 naming `requests.N.field`, as the API
refuses it; a request's own problems (no `max_tokens`) are its errored line. Errors are
Anthropic's envelope; no `x-api-key` (nor Authorization) is a 401.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakemodel.anthropic_api import error
from tests.fakemodel.batch_jobs import Job, answer, new_id, page

STAGES = ["in_progress", "in_progress", "ended"]
CUSTOM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
DAY = 24 * 3600
KINDS = ("succeeded", "errored", "canceled", "expired")


def _time(when: float | None) -> str | None:
    if when is None:
        return None
    return datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z")


@dataclass
class MessageBatch:
    job: Job
    requests: list[dict[str, Any]]
    results_url: str

    def obj(self) -> dict[str, Any]:
        job = self.job
        counts = dict.fromkeys(("processing", *KINDS), 0)
        for line in job.answered or []:
            counts[line["result"]["type"]] += 1
        if job.answered is None:
            counts["processing"] = len(self.requests)
        return {"id": job.id, "type": "message_batch",
                "processing_status": job.status, "request_counts": counts,
                "ended_at": _time(job.reached.get("ended")), "created_at": _time(job.created),
                "expires_at": _time(job.created + DAY), "archived_at": None,
                "cancel_initiated_at": _time(job.reached.get("canceling")),
                "results_url": self.results_url if job.ended else None}


def malformed(body: Any) -> str | None:
    """Why the API refuses a create body whole, or None."""
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not requests:
        return "requests: Field required (a non-empty list)"
    seen: set[str] = set()
    for i, given in enumerate(requests):
        custom_id = given.get("custom_id") if isinstance(given, dict) else None
        if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
            return f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
        if custom_id in seen:
            return f"requests.{i}.custom_id: Duplicate custom_id {custom_id!r} in the batch"
        seen.add(custom_id)
        if not isinstance(given.get("params"), dict):
            return f"requests.{i}.params: Input should be a valid dictionary"
    return None


async def _results(request: Request, batch: MessageBatch) -> list[dict[str, Any]]:
    """Every request answered by `POST /v1/messages`, as result lines."""
    headers = {"x-api-key": request.headers.get("x-api-key") or "fake",
               "anthropic-version": request.headers.get("anthropic-version", "2023-06-01")}
    lines = []
    for given in batch.requests:
        status, body = await answer(request, "/v1/messages", given["params"], headers)
        result = ({"type": "succeeded", "message": body} if status == 200
                  else {"type": "errored", "error": body})
        lines.append({"custom_id": given["custom_id"], "result": result})
    return lines


def routes() -> list[Route]:
    batches: dict[str, MessageBatch] = {}

    def found(request: Request) -> MessageBatch | Response:
        if not request.headers.get("x-api-key") and not request.headers.get("authorization"):
            return error("x-api-key header is required", 401, "authentication_error")
        batch_id = request.path_params["batch_id"]
        if batch_id not in batches:
            return error(f"No message batch with id '{batch_id}'.", 404, "not_found_error")
        return batches[batch_id]

    async def create(request: Request) -> Response:
        if not request.headers.get("x-api-key") and not request.headers.get("authorization"):
            return error("x-api-key header is required", 401, "authentication_error")
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            return error(f"invalid JSON body: {e}")
        if (why := malformed(body)) is not None:
            return error(why)
        job = Job(new_id("msgbatch_"), list(STAGES), results_at=STAGES.index("ended"))
        url = str(request.url_for("results", batch_id=job.id))
        batches[job.id] = MessageBatch(job, body["requests"], url)
        return JSONResponse(batches[job.id].obj())

    async def retrieve(request: Request) -> Response:
        batch = found(request)
        if isinstance(batch, Response):
            return batch
        if request.method == "DELETE":
            if not batch.job.ended:
                return error(f"Message batch {batch.job.id} is still being processed; cancel "
                             "it and wait for it to end before deleting it.")
            del batches[batch.job.id]
            return JSONResponse({"id": batch.job.id, "type": "message_batch_deleted"})
        if batch.job.poll():
            batch.job.answered = await _results(request, batch)
        elif batch.job.ended and batch.job.answered is None:  # canceled before its end
            batch.job.answered = [{"custom_id": given["custom_id"],
                                   "result": {"type": "canceled"}} for given in batch.requests]
        return JSONResponse(batch.obj())

    async def results(request: Request) -> Response:
        batch = found(request)
        if isinstance(batch, Response):
            return batch
        if not batch.job.ended or batch.job.answered is None:
            return error(f"Message batch {batch.job.id} has not ended: no results yet.")
        data = "".join(json.dumps(line, ensure_ascii=False) + "\n"
                       for line in batch.job.answered)
        return Response(data, media_type="application/binary")

    async def cancel(request: Request) -> Response:
        batch = found(request)
        if isinstance(batch, Response):
            return batch
        if batch.job.status != "in_progress":
            return error(f"Message batch {batch.job.id} is {batch.job.status}: it cannot be "
                         "canceled.")
        batch.job.end_as(["canceling", "ended"])
        batch.job.poll()
        return JSONResponse(batch.obj())

    async def listed(request: Request) -> Response:
        query = request.query_params
        limit = int(query["limit"]) if query.get("limit", "").isdigit() else 20
        chosen, more = page(list(reversed(batches.values())), lambda b: b.job.id,
                            query.get("after_id"), query.get("before_id"), limit)
        data = [batch.obj() for batch in chosen]
        return JSONResponse({"data": data, "has_more": more,
                             "first_id": data[0]["id"] if data else None,
                             "last_id": data[-1]["id"] if data else None})

    return [Route("/v1/messages/batches", create, methods=["POST"]),
            Route("/v1/messages/batches", listed, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}", retrieve, methods=["GET", "DELETE"]),
            Route("/v1/messages/batches/{batch_id}/results", results, methods=["GET"],
                  name="results"),
            Route("/v1/messages/batches/{batch_id}/cancel", cancel, methods=["POST"])]
