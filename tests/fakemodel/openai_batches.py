"""OpenAI's Files and Batches APIs on the fake model, as the openai SDK (`files.create`,
`batches.create`, `retrieve`, `files.content`) and inspect_ai's `--batch` call them.

Routes: `POST /v1/files` (multipart `file` and `purpose`), `GET /v1/files` (`purpose`,
`limit`, `after`, `order`), `GET`/`DELETE /v1/files/{id}`, `GET /v1/files/{id}/content`;
`POST /v1/batches` (`input_file_id`, `endpoint`, `completion_window` "24h", `metadata`),
`GET /v1/batches` (`limit`, `after`), `GET /v1/batches/{id}`,
`POST /v1/batches/{id}/cancel`. Files and batches live in the process.

A batch is `validating` at create, then each retrieve moves it one stage: `in_progress`,
`finalizing` (its lines answered now, each by the fake's route for the batch's endpoint,
batch_jobs.py), `completed`. Lines answered 200 go to the output file (`batch_output`
purpose), the others (the fake's 400 for a request it cannot answer) to the error file,
both as the API writes them: `{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error": null}`. A malformed input file is refused at the first
poll as the API refuses it: the batch ends `failed` with `errors.data[]` = `{code,
message, param, line}` (1-based), one per bad line. A cancel before `finalizing` goes
`cancelling`, then `cancelled` with no line answered. Errors are OpenAI's envelope.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakemodel.batch_jobs import Job, answer, new_id, page

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
STAGES = ["validating", "in_progress", "finalizing", "completed"]
PURPOSES = ("batch", "fine-tune", "assistants", "vision", "user_data", "evals")
DAY = 24 * 3600


def error(message: str, status: int = 400, param: str | None = None,
          code: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param,
                                   "code": code}}, status_code=status)


@dataclass
class File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created: int = field(default_factory=lambda: int(time.time()))

    def obj(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": len(self.data),
                "created_at": self.created, "filename": self.filename,
                "purpose": self.purpose, "status": "processed", "expires_at": None,
                "status_details": None}


@dataclass
class Batch:
    job: Job
    endpoint: str
    input_file_id: str
    window: str
    metadata: Any
    lines: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    output_file_id: str | None = None
    error_file_id: str | None = None

    def counts(self) -> dict[str, int]:
        if self.errors or self.job.status == "validating":
            return {"total": 0, "completed": 0, "failed": 0}
        done = self.job.answered or []
        failed = sum(1 for line in done if line["response"]["status_code"] != 200)
        return {"total": len(self.lines), "completed": len(done) - failed, "failed": failed}

    def obj(self) -> dict[str, Any]:
        job, at = self.job, self.job.reached.get
        return {"id": job.id, "object": "batch", "endpoint": self.endpoint,
                "errors": {"object": "list", "data": self.errors} if self.errors else None,
                "input_file_id": self.input_file_id, "completion_window": self.window,
                "status": job.status, "output_file_id": self.output_file_id,
                "error_file_id": self.error_file_id, "created_at": int(job.created),
                "in_progress_at": _int(at("in_progress")), "expires_at": int(job.created) + DAY,
                "finalizing_at": _int(at("finalizing")), "completed_at": _int(at("completed")),
                "failed_at": _int(at("failed")), "expired_at": None,
                "cancelling_at": _int(at("cancelling")), "cancelled_at": _int(at("cancelled")),
                "request_counts": self.counts(), "metadata": self.metadata,
                "model": self.lines[0]["body"].get("model") if self.lines else None}


def _int(when: float | None) -> int | None:
    return None if when is None else int(when)


def _line_error(number: int, code: str, message: str,
                param: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": param, "line": number}


def _check_line(number: int, text: str, endpoint: str,
                seen: dict[str, Any]) -> dict[str, Any] | tuple[dict[str, Any]]:
    """The request of one input line, or (its error,)."""
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return (_line_error(number, "invalid_json_line",
                            "This line is not parseable as valid JSON."),)
    for name, kind in (("custom_id", str), ("method", str), ("url", str), ("body", dict)):
        if not isinstance(obj.get(name), kind):
            return (_line_error(number, "missing_required_parameter",
                                f"Missing required parameter: '{name}'.", name),)
    if obj["custom_id"] in seen:
        return (_line_error(number, "duplicate_custom_id", "The custom_id for this request is "
                            "a duplicate of another request. The custom_id parameter must be "
                            "unique for each request in a batch.", "custom_id"),)
    if obj["method"] != "POST" or obj["url"] != endpoint:
        return (_line_error(number, "mismatched_endpoint", f"The provided URL "
                            f"'{obj['url']}' does not match the batch's endpoint "
                            f"'{endpoint}' (method POST).", "url"),)
    model = next((line["body"].get("model") for line in seen.values()), obj["body"].get("model"))
    if obj["body"].get("model") != model:
        return (_line_error(number, "mismatched_model", "The provided model "
                            f"'{obj['body'].get('model')}' does not match the model of the "
                            f"other requests in the batch ('{model}').", "body.model"),)
    return obj


def check_input(data: bytes, endpoint: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The requests of an input file and the errors of its malformed lines, as the API
    validates a batch (blank lines are skipped; line numbers count them)."""
    seen: dict[str, dict[str, Any]] = {}
    errors: list[dict[str, Any]] = []
    for number, text in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if not text.strip():
            continue
        checked = _check_line(number, text, endpoint, seen)
        if isinstance(checked, tuple):
            errors += checked
        else:
            seen[checked["custom_id"]] = checked
    if not seen and not errors:
        errors.append({"code": "empty_file", "message": "The batch input file is empty.",
                       "param": None, "line": None})
    return list(seen.values()), errors


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line, ensure_ascii=False).encode() + b"\n" for line in lines)


def _limit(request: Request, default: int) -> int:
    value = request.query_params.get("limit", str(default))
    return int(value) if value.isdigit() else default


class Store:
    """The process's files and batches, newest last."""

    def __init__(self) -> None:
        self.files: dict[str, File] = {}
        self.batches: dict[str, Batch] = {}

    def add_file(self, filename: str, purpose: str, data: bytes) -> File:
        made = File(new_id("file-"), filename, purpose, data)
        self.files[made.id] = made
        return made

    async def finish(self, request: Request, batch: Batch) -> None:
        """Answer every line by the route for it, and write the output and error files."""
        headers = {"authorization": request.headers.get("authorization", "Bearer fake")}
        done = []
        for line in batch.lines:
            status, body = await answer(request, line["url"], line["body"], headers)
            done.append({"id": new_id("batch_req_"), "custom_id": line["custom_id"],
                         "response": {"status_code": status, "request_id": new_id(""),
                                      "body": body}, "error": None})
        batch.job.answered = done
        ok = [line for line in done if line["response"]["status_code"] == 200]
        failed = [line for line in done if line["response"]["status_code"] != 200]
        name = batch.job.id
        if ok:
            batch.output_file_id = self.add_file(f"{name}_output.jsonl", "batch_output",
                                                 _jsonl(ok)).id
        if failed:
            batch.error_file_id = self.add_file(f"{name}_error.jsonl", "batch_output",
                                                _jsonl(failed)).id


def _listed(request: Request, items: list[Any], default_limit: int) -> JSONResponse:
    chosen, more = page(items, lambda item: item.id if isinstance(item, File) else item.job.id,
                        request.query_params.get("after"), None, _limit(request, default_limit))
    data = [item.obj() for item in chosen]
    return JSONResponse({"object": "list", "data": data,
                         "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None, "has_more": more})


def routes() -> list[Route]:
    store = Store()

    def no_file(file_id: str) -> JSONResponse:
        return error(f"No such File object: {file_id}", 404, "id")

    async def upload(request: Request) -> Response:
        async with request.form() as form:
            given, purpose = form.get("file"), form.get("purpose")
            if isinstance(given, str) or given is None:
                return error("Missing required parameter: 'file'.", param="file")
            if purpose not in PURPOSES:
                return error(f"Invalid value for 'purpose': {purpose!r}.", param="purpose")
            data = await given.read()
            made = store.add_file(given.filename or "upload", str(purpose), data)
        return JSONResponse(made.obj())

    async def files(request: Request) -> Response:
        purpose = request.query_params.get("purpose")
        chosen = [f for f in store.files.values() if purpose in (None, f.purpose)]
        if request.query_params.get("order", "desc") == "desc":
            chosen.reverse()
        return _listed(request, chosen, 10000)

    async def one_file(request: Request) -> Response:
        file_id = request.path_params["file_id"]
        if file_id not in store.files:
            return no_file(file_id)
        if request.method == "DELETE":
            del store.files[file_id]
            return JSONResponse({"id": file_id, "object": "file", "deleted": True})
        return JSONResponse(store.files[file_id].obj())

    async def content(request: Request) -> Response:
        file_id = request.path_params["file_id"]
        if file_id not in store.files:
            return no_file(file_id)
        return Response(store.files[file_id].data, media_type="application/octet-stream")

    async def create(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            return error(f"We could not parse the JSON body of your request. ({e})")
        if not isinstance(body, dict):
            return error("The body must be a JSON object.")
        return _created(store, body)

    async def retrieve(request: Request) -> Response:
        batch = store.batches.get(request.path_params["batch_id"])
        if batch is None:
            return error(f"No batch found with id '{request.path_params['batch_id']}'.", 404)
        if batch.job.poll():
            await store.finish(request, batch)
        return JSONResponse(batch.obj())

    async def cancel(request: Request) -> Response:
        batch = store.batches.get(request.path_params["batch_id"])
        if batch is None:
            return error(f"No batch found with id '{request.path_params['batch_id']}'.", 404)
        if batch.job.status not in ("validating", "in_progress"):
            return error(f"Cannot cancel a batch with status '{batch.job.status}'.", 409)
        batch.job.end_as(["cancelling", "cancelled"])
        batch.job.poll()
        return JSONResponse(batch.obj())

    async def batches(request: Request) -> Response:
        return _listed(request, list(reversed(store.batches.values())), 20)

    return [Route("/v1/files", upload, methods=["POST"]),
            Route("/v1/files", files, methods=["GET"]),
            Route("/v1/files/{file_id}", one_file, methods=["GET", "DELETE"]),
            Route("/v1/files/{file_id}/content", content, methods=["GET"]),
            Route("/v1/batches", create, methods=["POST"]),
            Route("/v1/batches", batches, methods=["GET"]),
            Route("/v1/batches/{batch_id}", retrieve, methods=["GET"]),
            Route("/v1/batches/{batch_id}/cancel", cancel, methods=["POST"])]


def _created(store: Store, body: dict[str, Any]) -> Response:
    """A new batch of `body`'s input file, or the API's error for a request it refuses."""
    for name in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(name), str):
            return error(f"Missing required parameter: '{name}'.", param=name)
    if body["endpoint"] not in ENDPOINTS:
        return error(f"Invalid value for 'endpoint': {body['endpoint']!r}; the fake batches "
                     f"{', '.join(ENDPOINTS)}.", param="endpoint")
    if body["completion_window"] != "24h":
        return error("Invalid value for 'completion_window': only '24h' is supported.",
                     param="completion_window")
    given = store.files.get(body["input_file_id"])
    if given is None:
        return error(f"No such File object: {body['input_file_id']}", 404, "input_file_id")
    lines, errors = check_input(given.data, body["endpoint"])
    job = Job(new_id("batch_"), list(STAGES), results_at=STAGES.index("finalizing"))
    if errors:
        job.end_as(["failed"])
    batch = Batch(job, body["endpoint"], given.id, body["completion_window"],
                  body.get("metadata"), lines, errors)
    store.batches[job.id] = batch
    return JSONResponse(batch.obj())
