"""The batch protocols' routes: OpenAI's Files and Batches, Anthropic's Message Batches.
Thin: each reads what its call needs from the request and asks the service
(`replay/batches/`), which answers in the API's shapes.

Every error leaves in its API's envelope (`Family.addressed`: a path below
/v1/messages is Anthropic's) with `x-should-retry: false`, as every error the server
sends. A call that sends something (an upload, a create, a cancel, a deletion) is
counted as a request by the app (`app._counted`): refused, it fails `run`; answered, it
is counted here (`Stats.calls`) and carries no generation of its own: a batch's lines
are counted one by one, as requests. Batches live in one process: under several
workers (`--workers`) every batch route refuses, rather than losing a batch to the
worker that did not create it.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ..errors import BadRequest
from ..replay.batches import AnthropicBatches, OpenAIBatches, Store
from .upload import read_form

router = APIRouter()
# The paths of the batch protocols' routes (and everything below them)
PATHS = ("/v1/files", "/v1/batches", "/v1/messages/batches")
_BINARY = "application/octet-stream"
_ANTHROPIC = {"x-envelope": "AnthropicError"}  # (schema.py: Anthropic's envelope)


def _store(request: Request) -> Store:
    settings = request.app.state.settings
    if settings.workers > 1 or settings.state is not None:
        raise BadRequest("batch jobs are kept in the process that created them: serve "
                         "them with --workers 1 and without --state (another worker or "
                         "replica would not know the batch)")
    store: Store = request.app.state.batches
    return store


def _openai(request: Request) -> OpenAIBatches:
    return OpenAIBatches(_store(request))


def _anthropic(request: Request) -> AnthropicBatches:
    return AnthropicBatches(_store(request))


def _json(request: Request, body: dict[str, Any]) -> Response:
    """The answer of a call; one that sends something is counted (see the docstring)."""
    if request.method not in ("GET", "HEAD"):
        request.app.state.replayer.called()
    return Response(orjson.dumps(body), media_type="application/json")


async def _body(request: Request, store: Store) -> bytes:
    """The request's body, received whole, but never past the upload cap (413)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit():
        store.check_size(int(length))
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        store.check_size(size)
        parts.append(chunk)
    return b"".join(parts)


@router.post("/v1/files", summary="Upload a batch's input file (multipart: `file`, "
             "`purpose=batch`), kept in memory", responses={
                 400: {"description": "No form, no `file`, or a purpose but `batch`"},
                 413: {"description": "Over --max-upload-size, or --max-batches files held"}})
async def upload_file(request: Request) -> Response:
    store = _store(request)
    form = read_form(request.headers.get("content-type", ""), await _body(request, store))
    file, purpose = form.get("file"), form.get("purpose")
    if file is None:
        raise BadRequest("`file` is required: the batch's input, a JSONL file",
                         param="file")
    if purpose is None:
        raise BadRequest("`purpose` is required (`batch`)", param="purpose")
    return _json(request, OpenAIBatches(store).upload(
        file.param("filename") or "upload.jsonl", purpose.data.decode("utf-8", "replace"),
        bytes(file.data)))


@router.get("/v1/files", summary="The files held: uploads, and batches' output and error "
            "files", responses={400: {"description": "A bad `limit` or `order`"}})
async def list_files(request: Request, after: str | None = None,
                     limit: int | None = None, order: str = "desc",
                     purpose: str | None = None) -> Response:
    return _json(request, _openai(request).files(after, limit, order, purpose))


@router.get("/v1/files/{file_id}", summary="A file's File object",
            responses={404: {"description": "No such file"}})
async def retrieve_file(request: Request, file_id: str) -> Response:
    return _json(request, _openai(request).file(file_id))


@router.get("/v1/files/{file_id}/content", summary="A file's bytes: an upload as it was "
            "sent, or a batch's output or error lines", response_class=Response,
            responses={200: {"content": {_BINARY: {}}},
                       404: {"description": "No such file"}})
async def file_content(request: Request, file_id: str) -> Response:
    return Response(_openai(request).content(file_id), media_type=_BINARY)


@router.delete("/v1/files/{file_id}", summary="Forget a file",
               responses={404: {"description": "No such file"}})
async def delete_file(request: Request, file_id: str) -> Response:
    return _json(request, _openai(request).delete(file_id))


@router.post("/v1/batches", summary="Create a batch: each line of its input file answered "
             "at once, as a request to `endpoint` alone is", responses={
                 400: {"description": "A bad body (`param` names the field)"},
                 404: {"description": "No such input file"},
                 413: {"description": "--max-batches batches held"}})
async def create_batch(request: Request) -> Response:
    store = _store(request)
    return _json(request, OpenAIBatches(store).create(await _body(request, store)))


@router.get("/v1/batches", summary="The batches, newest first",
            responses={400: {"description": "A bad `limit`"}})
async def list_batches(request: Request, after: str | None = None,
                       limit: int | None = None) -> Response:
    return _json(request, _openai(request).batches(after, limit))


@router.get("/v1/batches/{batch_id}", summary="A batch: ended (completed or failed) from "
            "its first poll", responses={404: {"description": "No such batch"}})
async def retrieve_batch(request: Request, batch_id: str) -> Response:
    return _json(request, _openai(request).batch(batch_id))


@router.post("/v1/batches/{batch_id}/cancel", summary="Cancel: the batch has ended "
             "already, and is answered as it is", responses={
                 404: {"description": "No such batch"}})
async def cancel_batch(request: Request, batch_id: str) -> Response:
    return _json(request, _openai(request).cancel(batch_id))


@router.post("/v1/messages/batches", summary="Create a Message Batch: each request "
             "answered at once, as a Messages request alone is", openapi_extra=_ANTHROPIC,
             responses={400: {"description": "A bad body (`requests.N.FIELD` named)"},
                        413: {"description": "Over --max-upload-size, or --max-batches "
                              "batches held"}})
async def create_message_batch(request: Request) -> Response:
    store = _store(request)
    body = await _body(request, store)
    return _json(request, AnthropicBatches(store).create(
        body, request.scope["headers"], str(request.base_url)))


@router.get("/v1/messages/batches", summary="The Message Batches, newest first",
            openapi_extra=_ANTHROPIC, responses={400: {"description": "A bad `limit`"}})
async def list_message_batches(
        request: Request, before_id: str | None = None, after_id: str | None = None,
        limit: int | None = Query(None)) -> Response:
    return _json(request, _anthropic(request).batches(before_id, after_id, limit,
                                                      str(request.base_url)))


@router.get("/v1/messages/batches/{batch_id}", summary="A Message Batch: ended from its "
            "first poll", openapi_extra=_ANTHROPIC,
            responses={404: {"description": "No such batch"}})
async def retrieve_message_batch(request: Request, batch_id: str) -> Response:
    return _json(request, _anthropic(request).batch(batch_id, str(request.base_url)))


@router.get("/v1/messages/batches/{batch_id}/results", summary="Its results, one JSONL line "
            "a request: `succeeded` (the saved message) or `errored` (the replay error)",
            openapi_extra=_ANTHROPIC, response_class=Response,
            responses={200: {"content": {_BINARY: {}}},
                       404: {"description": "No such batch"}})
async def message_batch_results(request: Request, batch_id: str) -> Response:
    return Response(_anthropic(request).results(batch_id), media_type=_BINARY)


@router.post("/v1/messages/batches/{batch_id}/cancel", summary="Cancel: the batch has "
             "ended already, and is answered as it is", openapi_extra=_ANTHROPIC,
             responses={404: {"description": "No such batch"}})
async def cancel_message_batch(request: Request, batch_id: str) -> Response:
    return _json(request, _anthropic(request).cancel(batch_id, str(request.base_url)))


@router.delete("/v1/messages/batches/{batch_id}", summary="Forget a Message Batch",
               openapi_extra=_ANTHROPIC, responses={404: {"description": "No such batch"}})
async def delete_message_batch(request: Request, batch_id: str) -> Response:
    return _json(request, _anthropic(request).delete(batch_id))
