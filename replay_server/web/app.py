"""create_app(settings, index) -> FastAPI. Nothing stateful at import.

The replay endpoints (chat, completions, responses; Anthropic's messages and count_tokens)
are the hot path. They are plain
ASGI apps (`ReplayEndpoint`) that `ReplayApp` calls first, ahead of FastAPI's middleware,
routing, dependency and response machinery, which costs several times the replay work
itself. They are also mounted as routes (so a GET on them is a 405, not a 404) and
documented in the OpenAPI schema. vLLM's tokenizer endpoints (`/tokenize`, `/detokenize`,
`/tokenizer_info`, at the root as vLLM serves them) go the same way, to the Replayer's
`tokenizer` (replay/tokenizer.py), whose errors are counted apart: they carry no
generation. Everything else is ordinary FastAPI, in `routes.py`.
Every error, whichever layer raises it, leaves in its API's envelope (an endpoint's
family's; else Anthropic's for a request carrying `anthropic-version`, OpenAI's for any
other) with `x-should-retry: false`, and every error sent for a request that may have
cost a generation (`_counted`: one on a generation endpoint, or one that sends something)
is counted (`Stats`), so that `run` fails on it even when the harness swallows it; a probe
of the base URL or of another route is answered as a real server answers it, and is not.
With `--upstream`, a request for a model the saved runs lack goes to the upstream instead
(`upstream.py`).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from .. import __version__, errors
from ..errors import BadRequest, PayloadTooLarge, ReplayServerError, Unauthorized
from ..index.index import Index
from ..index.samples import Rules
from ..paths import ENDPOINTS, TOKENIZER_ENDPOINTS, TOKENIZER_INFO_PATH
from ..replay.replayer import Replayer
from ..saved.loader import context
from ..settings import Settings
from ..wire.families import error_body_of, family_of
from .recorder import Recorder
from .routes import router
from .schema import openapi
from .upstream import Upstream
from .writes import when_sent

log = logging.getLogger(__name__)

TOKENIZER_METHODS = {TOKENIZER_INFO_PATH: "GET"}  # the other endpoints take a POST
# What --api-key leaves open: /health, and the tokenizer endpoints, as vLLM does (its key
# guards /v1 only): olmo-eval's tokenizer client sends no key. They reveal nothing saved
# that the request does not already hold.
UNGUARDED = frozenset({"/health", *TOKENIZER_ENDPOINTS})


async def send_error(send: Send, error: ReplayServerError, scope: Scope) -> None:
    status, headers, body = errors.render(error, error_body_of(scope["path"], scope["headers"]))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def internal_error(exc: BaseException) -> ReplayServerError:
    log.exception("internal error", exc_info=exc)
    return ReplayServerError(f"internal error in replay-server: {type(exc).__name__}; "
                             "see the server log. Please report it.")


class ReplayEndpoint:
    """POST /v1/chat/completions, /v1/completions or /v1/responses, as a plain ASGI app
    (`ReplayApp` calls it first; any ASGI server can serve it); and vLLM's tokenizer
    endpoints (POST /tokenize, /detokenize, GET /tokenizer_info) the same way, answered by
    the Replayer's `tokenizer`, which counts them apart from the generations.

    Its answer is known whole at once (a stream's frames are all saved), so it leaves in
    one start and one body message. The headers alone can decide it (a missing or wrong
    API key, a Content-Length over --max-body-size); else the body, received whole (a
    client too slow to send it is cut off by `guarded.GuardedProtocol`, one that leaves
    gets nothing: cut off in flight), goes to the Replayer, which takes the samples that
    answer it. They are counted used once the server says the answer left
    (`writes.when_sent`), and given back if it never did."""

    def __init__(self, replayer: Replayer, endpoint: str, max_body: int,
                 api_key: bytes | None = None, upstream: Upstream | None = None) -> None:
        self.replayer = replayer
        self.endpoint = endpoint
        # the family's own error body (a tokenizer endpoint's is vLLM's, the OpenAI one)
        self.envelope = family_of(endpoint).error_body if endpoint in ENDPOINTS else None
        self.tokenizer = endpoint in TOKENIZER_ENDPOINTS
        self.max_body = max_body
        self.api_key = api_key
        self.upstream = upstream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.replayer.stats.requests += 1
        reply = None
        try:
            if self.api_key is not None and not authorized(scope["headers"], self.api_key):
                raise self._counted(unauthorized())
            self._check_length(scope["headers"])
            message: Message = await receive()
            if message["type"] != "http.request" or message.get("more_body", False):
                body = await self._rest(receive, message)
                if body is None:
                    return
            else:  # the whole body in one message, as usual
                body = message.get("body", b"")
            if len(body) > self.max_body:
                raise self._counted(self.too_large(len(body)))
            if self.upstream is not None and not self.tokenizer and (
                    model := self.replayer.forwards(body)):
                await self.upstream.forward(scope, receive, send, self.endpoint, body, model)
                return
            if self.tokenizer:  # counts what it raises, apart
                headers, data = self.replayer.tokenizer.answer(self.endpoint, body)
            else:  # (it counts what it raises)
                reply = self.replayer.take(self.endpoint, body, scope["headers"])
                headers, data = reply.headers, reply.body
            status = 200
        except ReplayServerError as error:
            status, headers, data = errors.render(error, self.envelope)
        except Exception as exc:
            status, headers, data = errors.render(self._counted(internal_error(exc)), self.envelope)
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": data})
        except BaseException:
            if reply is not None:
                self.replayer.settle(reply, False)
            raise
        if reply is not None:  # a hit once it left; else its samples are given back
            when_sent(scope, partial(self.replayer.settle, reply))

    def _counted(self, error: ReplayServerError) -> ReplayServerError:
        """An error that `handle` does not count, counted."""
        self.replayer.count(None, self.endpoint, error)
        return error

    def _check_length(self, headers: list[tuple[bytes, bytes]]) -> None:
        for name, value in headers:
            if name == b"content-length":
                try:
                    size = int(value)
                except ValueError:
                    raise self._counted(BadRequest(
                        "the Content-Length header is not a number")) from None
                if size > self.max_body:
                    raise self._counted(self.too_large(size))

    async def _rest(self, receive: Receive, message: Message) -> bytes | None:
        """The body that begins with `message`, received whole; None if the client left."""
        parts: list[bytes] = []
        total = 0
        while True:
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_body:
                raise self._counted(self.too_large(total))
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)
            message = await receive()

    def too_large(self, size: int) -> PayloadTooLarge:
        return PayloadTooLarge(f"the request body has {size} bytes or more; this server "
                               f"accepts at most {self.max_body} (--max-body-size)")


def unauthorized() -> Unauthorized:
    return Unauthorized(
        "missing or wrong API key: send the header `Authorization: Bearer KEY` (or "
        "Anthropic's `x-api-key: KEY`) with the key this server was started with "
        "(--api-key or REPLAY_SERVER_API_KEY)")


def authorized(headers: list[tuple[bytes, bytes]], api_key: bytes) -> bool:
    """Whether the first Authorization header is `Bearer KEY`, or, without one, the first
    `x-api-key` header is `KEY` (how Anthropic's clients send it)."""
    key = None
    for name, value in headers:
        if name == b"authorization":
            return hmac.compare_digest(value, b"Bearer " + api_key)
        if name == b"x-api-key" and key is None:
            key = value
    return key is not None and hmac.compare_digest(key, api_key)


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
    answered as a real server answers it, an unknown route with a 404, and is no miss."""
    path: str = scope["path"]
    return scope["method"] not in READS or path in ENDPOINTS or path.startswith(BELOW_ENDPOINTS)


class ReplayApp(FastAPI):
    """A FastAPI app that sends POSTs to the replay endpoints straight to them, ahead of
    its middleware, routing and response machinery; with an API key, it (or the endpoint)
    turns away every request but `GET /health` and the tokenizer endpoints (`UNGUARDED`)
    that does not carry `Authorization: Bearer KEY`."""

    fast_paths: dict[tuple[str, str], ReplayEndpoint]  # (method, path)
    replayer: Replayer
    api_key: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        endpoint = self.fast_paths.get((scope["method"], scope["path"]))
        if endpoint is not None:  # it checks the API key itself
            await endpoint(scope, receive, send)
            return
        if self.api_key is not None and scope["path"] not in UNGUARDED \
                and not authorized(scope["headers"], self.api_key):
            error = unauthorized()
            if _counted(scope):
                self.replayer.stats.requests += 1
                self.replayer.count(None, scope["path"], error)
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
                self.replayer.stats.requests += 1   # answer: a reset, a saved response)
            if status >= 400:
                error = ReplayServerError(f"HTTP {status} for {scope['method']} "
                                          f"{scope['path']}")
                error.status = status
                self.replayer.count(None, scope["path"], error)
            await send(message)

        return counting


def _error_response(request: Request, error: ReplayServerError) -> Response:
    status, headers, body = errors.render(error, error_body_of(request.url.path,
                                                               request.scope["headers"]))
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
        message += (" (this server answers /v1/chat/completions, /v1/completions, "
                    "/v1/responses, /v1/messages, /v1/messages/count_tokens, /v1/models, "
                    "and vLLM's /tokenize, /detokenize, /tokenizer_info)")
    return _error_response(request, kind(message))


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


def create_app(settings: Settings, index: Index, recorder: Recorder | None = None
               ) -> FastAPI:
    """The whole server for one loaded index; with `recorder` (`upstream.recorder_for`),
    requests for a model the saved runs lack go through it to the upstream (the caller
    closes its writer; the app, its client)."""
    replayer = Replayer(index, Rules(settings.strict, settings.allow_ambiguous),
                        context(tokenizer=settings.tokenizer).tokenizer,
                        settings.upstream_patterns() if recorder is not None else None)
    upstream = Upstream(recorder, replayer) if recorder is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
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
    app.fast_paths = endpoints
    app.replayer = replayer
    app.api_key = api_key
    app.add_exception_handler(HTTPException, _http_exception)
    app.add_exception_handler(ReplayServerError, _replay_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
    app.openapi = lambda: openapi(app, api_key is not None)  # type: ignore[method-assign]
    return app
