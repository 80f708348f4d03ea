"""The hot path, as a plain ASGI app (`ReplayEndpoint`): every generation request (chat,
completions, responses; Anthropic's messages and count_tokens) and vLLM's tokenizer calls,
which `ReplayApp` (app.py) sends here ahead of FastAPI's machinery; and the API key check
the app shares (`authorized`).

An endpoint never starts an answer it has not decided whole, and never counts the samples
an answer takes as used before the answer left. Every error it sends is counted (a
tokenizer call's apart), so that `run` fails on it even when the harness swallows it.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import Message, Receive, Scope, Send

from .. import errors
from ..errors import BadRequest, PayloadTooLarge, ReplayServerError, Unauthorized
from ..paths import TOKENIZER_ENDPOINTS
from ..replay.replayer import Replayer, Reply
from ..replay.state import Busy
from ..wire.families import ENDPOINTS, family_of
from .upstream import Upstream
from .writes import when_sent

log = logging.getLogger(__name__)


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
        # the family (a tokenizer endpoint has none), and its own error body (a tokenizer
        # endpoint's is vLLM's, the OpenAI one)
        self.family = family_of(endpoint) if endpoint in ENDPOINTS else None
        self.envelope = self.family.error_body if self.family is not None else None
        self.tokenizer = endpoint in TOKENIZER_ENDPOINTS
        self.max_body = max_body
        self.api_key = api_key
        self.upstream = upstream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reply = None
        query = scope.get("query_string", b"")
        try:
            self.replayer.begun()  # (a store that cannot be reached: counted, loudly)
            if self.api_key is not None and not authorized(scope["headers"], query,
                                                           self.api_key):
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
            # the fields its path carries (Gemini's model; none at an exact path)
            fields = self.family.fields_of(scope["path"], query.decode("latin-1")) \
                if self.family is not None else None
            if self.upstream is not None and not self.tokenizer and (
                    model := self.replayer.forwards(body, fields)):
                await self.upstream.forward(scope, receive, send, self.endpoint, body, model)
                return
            if self.tokenizer:  # counts what it raises, apart
                headers, data = self.replayer.tokenizer.answer(self.endpoint, body)
            else:  # (it counts what it raises)
                reply = await self._take(body, scope["headers"], fields)
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

    async def _take(self, body: bytes, headers: list[tuple[bytes, bytes]],
                    fields: dict[str, Any] | None) -> Reply:
        """The Replayer's reply; while it is `Busy` (a shared state: every sample taken,
        some only promised to an answer on its way on another replica), asked again after
        a pause, without holding the event loop, until it decides or the wait is over
        (then it decides: exhausted, counted)."""
        deadline = None
        while True:
            patient = deadline is None or time.monotonic() < deadline
            try:
                return self.replayer.take(self.endpoint, body, headers, fields, patient)
            except Busy as busy:
                deadline = deadline or time.monotonic() + busy.wait_s
                await asyncio.sleep(busy.retry_s)

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
        "Anthropic's `x-api-key: KEY`, or Google's `x-goog-api-key: KEY` or `?key=KEY`) "
        "with the key this server was started with (--api-key or REPLAY_SERVER_API_KEY)")


# The headers whose value is the key itself: Anthropic's clients send it so, Google's too.
_KEY_HEADERS = (b"x-api-key", b"x-goog-api-key")


def authorized(headers: list[tuple[bytes, bytes]], query: bytes, api_key: bytes) -> bool:
    """Whether the first credential the request carries is the key: the first
    Authorization header (`Bearer KEY`); without one, the first `x-api-key` or
    `x-goog-api-key` header (how Anthropic's and Google's clients send it); without any,
    the query's `key` parameter (Google's REST form)."""
    key = None
    for name, value in headers:
        if name == b"authorization":
            return hmac.compare_digest(value, b"Bearer " + api_key)
        if name in _KEY_HEADERS and key is None:
            key = value
    if key is None:
        key = next((v.encode() for k, v in parse_qsl(query.decode("latin-1"))
                    if k == "key"), None)
    return key is not None and hmac.compare_digest(key, api_key)
