"""create_app(settings, index) -> FastAPI. Nothing stateful at import.

The replay endpoints (chat, completions, responses; Anthropic's messages and count_tokens)
are the hot path. They are plain ASGI apps (`endpoint.ReplayEndpoint`) that `ReplayApp`
calls first, ahead of FastAPI's middleware, routing, dependency and response machinery,
which costs several times the replay work itself. They are also mounted as routes (so a
GET on them is a 405, not a 404) and documented in the OpenAPI schema. vLLM's tokenizer
endpoints (`/tokenize`, `/detokenize`, `/tokenizer_info`, at the root as vLLM serves them)
go the same way, to the Replayer's `tokenizer` (replay/tokenizer.py), whose errors are
counted apart: they carry no generation. Everything else is ordinary FastAPI, in
`routes.py`.
Every error, whichever layer raises it, leaves in its API's envelope (an endpoint's
family's; else the family that claims it by its headers, `Family.claims`: Anthropic's
for a request carrying `anthropic-version`; OpenAI's for any other) with
`x-should-retry: false`, and every error sent for a request that may have
cost a generation (`_counted`: one on a generation endpoint, or one that sends something)
is counted (`Stats`), so that `run` fails on it even when the harness swallows it; a probe
of the base URL or of another route is answered as a real server answers it, and is not.
With `--upstream`, a request for a model the saved runs lack goes to the upstream instead
(`upstream.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from .. import __version__, errors
from ..errors import BadRequest, ReplayServerError, StoreUnavailable
from ..index.index import Index
from ..index.samples import Rules
from ..paths import MODELS_PATH, TOKENIZER_ENDPOINTS, TOKENIZER_INFO_PATH
from ..replay.batches import Store
from ..replay.replayer import Replayer
from ..replay.state import shared
from ..saved.local_tokenizer import LocalTokenizer
from ..settings import Settings
from ..wire.credentials import shown
from ..wire.families import ENDPOINTS, endpoint_for, error_body_of
from .batches import PATHS as BATCH_PATHS
from .batches import router as batches_router
from .endpoint import ReplayEndpoint, authorized, internal_error, unauthorized
from .recorder import Recorder
from .routes import router
from .schema import openapi
from .upstream import Upstream

TOKENIZER_METHODS = {TOKENIZER_INFO_PATH: "GET"}  # the other endpoints take a POST
# What --api-key leaves open: /health, and the tokenizer endpoints, as vLLM does (its key
# guards /v1 only): olmo-eval's tokenizer client sends no key. They reveal nothing saved
# that the request does not already hold.
UNGUARDED = frozenset({"/health", *TOKENIZER_ENDPOINTS})


def _query(scope: Scope) -> str:
    return bytes(scope.get("query_string", b"")).decode("latin-1")


async def send_error(send: Send, error: ReplayServerError, scope: Scope) -> None:
    status, headers, body = errors.render(error, error_body_of(scope["path"], scope["headers"],
                                                               _query(scope)))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


READS = frozenset({"GET", "HEAD", "OPTIONS"})
# Below a generation endpoint: a saved answer by its id (GET /v1/responses/{id}; OpenAI's
# stored chat completions, /v1/chat/completions/{id}, which no saved run has).
BELOW_ENDPOINTS = tuple(path + "/" for path in ENDPOINTS)


def _counted(scope: Scope) -> bool:
    """Whether an error answer to this request may have cost the harness a generation, so
    that `run` fails on it: any request on a generation endpoint or below one, whatever
    its method, and any request that sends something (a method but GET, HEAD or OPTIONS),
    wherever it goes: a POST to a misspelled path is a generation asked for and not had. A
    read of any other route (a probe of the base URL, `GET /v1/`; a model by its id) is
    answered as a real server answers it, an unknown route with a 404, and is no miss. (A
    generation endpoint with parameters in its path, Gemini's, by `endpoint_for`.) A
    batch protocol's routes (`batches.PATHS`: /v1/messages/batches extends the path of
    Anthropic's endpoint) are not below an endpoint: their reads are reads, and each line
    of a batch is counted as a request of its own (replay/batches/store.py)."""
    path: str = scope["path"]
    return scope["method"] not in READS or path in ENDPOINTS or (
        path.startswith(BELOW_ENDPOINTS) and not path.startswith(BATCH_PATHS)
    ) or endpoint_for(path, _query(scope)) is not None


class ReplayApp(FastAPI):
    """A FastAPI app that sends POSTs to the replay endpoints straight to them, ahead of
    its middleware, routing and response machinery; with an API key, it (or the endpoint)
    turns away every request but `GET /health` and the tokenizer endpoints (`UNGUARDED`)
    that does not carry `Authorization: Bearer KEY`. A POST to a path with parameters in
    it (Gemini's `models/{model}:generateContent`) goes to its endpoint too
    (`endpoint_for`)."""

    fast_paths: dict[tuple[str, str], ReplayEndpoint]  # (method, path)
    replayer: Replayer
    api_key: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        endpoint = self.fast_paths.get((scope["method"], scope["path"]))
        if endpoint is None and scope["method"] == "POST":  # a path with parameters in it
            found = endpoint_for(scope["path"], _query(scope))
            endpoint = self.fast_paths.get(("POST", found[0].path)) if found else None
        if endpoint is not None:  # it checks the API key itself
            await endpoint(scope, receive, send)
            return
        if self.api_key is not None and scope["path"] not in UNGUARDED \
                and not authorized(scope["headers"], scope.get("query_string", b""),
                                   self.api_key):
            error: ReplayServerError = unauthorized()
            if _counted(scope):
                self.replayer.begun()
                try:
                    self.replayer.count(None, scope["path"], error)
                except StoreUnavailable as down:  # (kept, to send once the store is back)
                    error = down
            await send_error(send, error, scope)
            return
        if not _counted(scope):
            await super().__call__(scope, receive, send)
            return
        await super().__call__(scope, receive, self._counting(scope, send))

    def _counting(self, scope: Scope, send: Send) -> Send:
        """`send`, counting a request `_counted` names as it is answered (these routes
        read no body: answered is the one way they end), and an error answer as a
        failure (a misspelled endpoint, a wrong method): a harness that swallows it would
        otherwise pass. A redirect (307: a path with a trailing slash, as vLLM answers it)
        is no request of its own: the one its client then sends is counted."""

        async def counting(message: Message) -> None:
            status = message.get("status", 0) if message["type"] == "http.response.start" \
                else 0
            if status and not 300 <= status < 400:  # (each has an outcome: an error, or an
                self.replayer.begun()               # answer: a reset, a saved response)
            if status >= 400:
                error = ReplayServerError(f"HTTP {status} for {scope['method']} "
                                          f"{scope['path']}")
                error.status = status
                try:
                    self.replayer.count(None, scope["path"], error)
                except StoreUnavailable:
                    pass  # (kept, sent once the store is back; the answer is an error)
            await send(message)

        return counting


def _error_response(request: Request, error: ReplayServerError) -> Response:
    status, headers, body = errors.render(error, error_body_of(
        request.url.path, request.scope["headers"], _query(request.scope)))
    return Response(body, status_code=status,
                    headers={k.decode(): v.decode() for k, v in headers
                             if k != b"content-length"})


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kinds: dict[int, type[ReplayServerError]] = {
        404: errors.NotFound, 405: errors.MethodNotAllowed, 413: errors.PayloadTooLarge,
        401: errors.Unauthorized,
    }
    kind = kinds.get(exc.status_code, BadRequest)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    message = f"{detail}: {request.method} {request.url.path}"
    if exc.status_code == 404:
        message += f" (this server answers {_ANSWERED})"
    return _error_response(request, kind(message))


_ANSWERED = (", ".join((*ENDPOINTS, MODELS_PATH))
             + f", and vLLM's {', '.join(TOKENIZER_ENDPOINTS)}")


async def _replay_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ReplayServerError)
    return _error_response(request, exc)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
    return _error_response(request, BadRequest(f"{param}: {first.get('msg', 'invalid')}",
                                               param=param))


async def _unexpected(request: Request, exc: Exception) -> Response:
    return _error_response(request, internal_error(exc))


def create_app(settings: Settings, index: Index, recorder: Recorder | None = None,
               tokenizer: LocalTokenizer | None = None) -> FastAPI:
    """The whole server for one loaded index; with `recorder` (`upstream.recorder_for`),
    requests for a model the saved runs lack go through it to the upstream (the caller
    closes its writer; the app, its client); `tokenizer`, --tokenizer's, loaded once by
    the caller (`saved.loader.tokenizer_of`), computes tokenizer calls. With --state, the
    app is a replica of the shared state from here on (its lifespan's end says it
    stopped)."""
    rules = Rules(settings.strict, settings.allow_ambiguous)
    state = shared(index, settings.state, shown(settings.state), settings.state_prefix,
                   rules) if settings.state is not None else None
    replayer = Replayer(index, rules, tokenizer,
                        settings.upstream_patterns() if recorder is not None else None,
                        state)
    upstream = Upstream(recorder, replayer) if recorder is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        replayer.state.close()  # (a shared state: this replica stopped, cleanly)
        if recorder is not None:
            await recorder.close()

    # no /docs nor /redoc: FastAPI's pages load their scripts from a CDN, blank offline
    app = ReplayApp(title="replay-server", version=__version__, docs_url=None, redoc_url=None,
                    description="Replays saved LLM generations over the OpenAI API.",
                    lifespan=lifespan)
    app.state.replayer = replayer
    app.state.settings = settings
    app.state.recorder = recorder
    api_key = settings.api_key.encode() if settings.api_key else None
    endpoints = {(TOKENIZER_METHODS.get(path, "POST"), path):
                 ReplayEndpoint(replayer, path, settings.max_body_size,
                                None if path in TOKENIZER_ENDPOINTS else api_key, upstream)
                 for path in ENDPOINTS + TOKENIZER_ENDPOINTS}
    for (method, path), endpoint in endpoints.items():
        app.router.routes.append(Route(path, endpoint, methods=[method]))
    app.include_router(router)
    app.include_router(batches_router)
    app.state.batches = Store(replayer, settings.max_upload_size, settings.max_batches)
    app.fast_paths = endpoints
    app.replayer = replayer
    app.api_key = api_key
    app.add_exception_handler(HTTPException, _http_exception)
    app.add_exception_handler(ReplayServerError, _replay_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
    app.openapi = lambda: openapi(app, api_key is not None)  # type: ignore[method-assign]
    return app
