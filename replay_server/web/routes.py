"""The thin endpoints beside the replay hot path: health, models (and Google's model by
its name), saved responses by id, status, reset.

Each one asks the Replayer and returns; no logic lives here. Each declares the statuses
it answers (`schema.py` documents every error as the OpenAI envelope).
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.convertors import Convertor, register_url_convertor

from ..errors import BadRequest
from ..paths import GEMINI_PATH, RESPONSES_PATH
from ..replay.replayer import Replayer
from ..wire.families import family_of


class _ModelName(Convertor[str]):
    """A model's name in Google's model paths (`org/name` too), never a call of one of its
    methods (`NAME:embedContent`): a method the replay does not serve is a 404 in Google's
    envelope, not a 405 from the model's GET route (nor, with a slash after it, a redirect
    to that route)."""

    regex = r"(?!.*:[A-Za-z]+/?$).+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("model_name", _ModelName())
router = APIRouter()
# Google's routes answer errors in Google's envelope (`schema.py` documents it so)
_GOOGLE_ERRORS = {"x-envelope": (family_of(GEMINI_PATH).error_schema or ("Error",))[0]}


def _replayer(request: Request) -> Replayer:
    replayer: Replayer = request.app.state.replayer
    return replayer


def _json(body: bytes) -> Response:
    return Response(body, media_type="application/json")


def _asked(request: Request) -> tuple[list[tuple[bytes, bytes]], str, str]:
    """What tells whose API a request is: its headers, path and query string."""
    return request.scope["headers"], request.url.path, request.url.query


@router.get("/health", summary="Liveness: 200 with an empty body once the index is loaded",
            response_class=Response, responses={200: {"description": "Loaded"}})
async def health() -> Response:
    return Response(status_code=200)


@router.get("/v1/models", summary="The saved models this server answers for (vLLM's shape; "
            "Anthropic's for a request with the `anthropic-version` header; Google's for "
            "one with `x-goog-api-key`, or `key`, `pageSize` or `pageToken` in its query)")
async def models(request: Request) -> Response:
    return _json(_replayer(request).models_body(*_asked(request)))


@router.get("/{version}/models", summary="Google's list of the saved models (under "
            "`v1beta`, `v1alpha`, `v1beta1`)", openapi_extra=_GOOGLE_ERRORS,
            responses={404: {"description": "No such version"}})
@router.get("/{version}/publishers/google/models", summary="Google's list of the saved "
            "models, where Vertex AI's clients ask for it", openapi_extra=_GOOGLE_ERRORS,
            responses={404: {"description": "No such version"}})
async def versioned_models(request: Request, version: str) -> Response:
    return _json(_replayer(request).models_body(*_asked(request)))


@router.get("/{version}/models/{model:model_name}", summary="A saved model by its name, in "
            "Google's shape (for a request of Google's API)", openapi_extra=_GOOGLE_ERRORS,
            responses={404: {"description": "No saved model of this name, or not a request "
                             "of Google's API"}})
@router.get("/{version}/publishers/google/models/{model:model_name}", summary="A saved model by "
            "its name, in Google's shape, where Vertex AI's clients ask for it",
            openapi_extra=_GOOGLE_ERRORS, responses={404: {"description": "No saved model "
                                                           "of this name"}})
async def model(request: Request, version: str, model: str) -> Response:
    headers, path, query = _asked(request)
    return _json(_replayer(request).model_body(model, headers, path, query))


@router.get("/{version}/projects/{project}/locations/{location}/publishers/google/models/"
            "{model:model_name}", summary="A saved model by its name, in Google's shape (Vertex "
            "AI's path of a project)", openapi_extra=_GOOGLE_ERRORS,
            responses={404: {"description": "No saved model of this name"}})
async def project_model(request: Request, version: str, project: str, location: str,
                        model: str) -> Response:
    """(The project and location name no saved run: any is answered alike.)"""
    headers, path, query = _asked(request)
    return _json(_replayer(request).model_body(model, headers, path, query))


@router.get("/v1/responses/{response_id}",
            summary="A saved Responses API answer by its id (stream=true: as it was streamed)",
            responses={200: {"content": {"text/event-stream": {}}},
                       400: {"description": "`stream` is not a boolean"},
                       404: {"description": "No saved response has this id (as vLLM answers)"}})
async def retrieve_response(request: Request, response_id: str, stream: bool = False
                            ) -> Response:
    reply = _replayer(request).retrieve(family_of(RESPONSES_PATH), response_id, stream)
    return Response(reply.body, headers={k.decode(): v.decode() for k, v in reply.headers
                                         if k != b"content-length"})


@router.post("/v1/responses/{response_id}/cancel",
             summary="Cancel: a replayed answer is never in progress (400, like vLLM)",
             status_code=400, response_description="Always: nothing to cancel")
async def cancel_response(request: Request, response_id: str) -> Response:
    raise BadRequest("Cannot cancel a synchronous response.", param="response_id")


@router.get("/replay/status",
            summary="Per model: records loaded, answers, each replay error, unused samples")
async def status(request: Request) -> Response:
    return _json(orjson.dumps(_replayer(request).status()))


@router.get("/replay/misses", summary="Recent requests that got no saved generation, newest "
            "last, with the nearest saved prompt and where they first differ")
async def misses(request: Request) -> Response:
    return _json(orjson.dumps({"misses": list(_replayer(request).current().misses)}))


@router.post("/replay/reset", summary="Forget cursors and counters, as if just started",
             status_code=204, response_class=Response, response_description="Forgotten")
async def reset(request: Request) -> Response:
    _replayer(request).reset()
    return Response(status_code=204)
