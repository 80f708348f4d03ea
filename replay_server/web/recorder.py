"""The recording proxy: forwards to any OpenAI-compatible (or Anthropic-compatible) server
and saves each exchange.

    client -> recorder -> upstream (vLLM, llama.cpp, OpenAI, Anthropic, ...)

- `/v1/chat/completions`, `/v1/completions`, `/v1/responses`, and Anthropic's
  `/v1/messages` and `/v1/messages/count_tokens` are forwarded with the client's headers
  (Authorization and x-api-key included; they are never written down) and their answers
  saved as native records, with the headers that are request fields (`anthropic-beta`);
  every other path and method (`/v1/models`, embeddings, files, `GET /v1/responses/{id}`,
  a path the upstream does not have, ...) is forwarded untouched and not saved: the
  client gets the upstream's own status and body.
- A stream passes through chunk by chunk as it arrives, while its family's aggregator
  (`Family.aggregator`) rebuilds the body the server would have sent unstreamed; the
  stream's frames are saved too, as sent, so that a replay sends the same deltas in the
  same order.
- An exchange is appended as whole lines, flushed and fsynced *before* the client sees its
  end (the response body, or a stream's `data: [DONE]` or the end of its body): an
  exchange a client has seen complete survives a SIGKILL, and concurrent exchanges never
  interleave within a line.
- A stream is saved when the client received it whole: up to `data: [DONE]`, or, when the
  upstream ends the body cleanly without one (openai-python accepts that), once every
  choice the request asked for has its finish_reason (a Responses stream: its terminal
  event; a Messages stream: `message_stop`). Its frames are saved as sent, with no
  `[DONE]` added, so that a replay sends the same bytes. A stream cut before that is not saved.
- Only exchanges delivered to the client are saved: a client that gives up (a timeout, a
  disconnect) before the answer is complete leaves nothing behind, and the upstream call
  is cancelled; it is counted as abandoned. A harness that then retries gets its retry
  recorded, not an answer it never saw.
- Upstream errors, streams that fail, and answers that do not parse or cannot be
  aggregated pass through untouched and are only counted.
- The upstream is asked for an uncompressed answer, and whatever encoding it uses anyway
  is decoded before the client sees it.
- Each recorder process is one run (`source.run`): records of two recording sessions
  appended to one file never form one instance.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from .. import __version__, errors
from ..errors import LoadError
from ..paths import ENDPOINTS
from ..saved.record import batch_parts, dump_line, make_record, strip_transport
from ..saved.writer import RecordWriter
from ..wire.families import family_of
from ..wire.family import Aggregator
from ..wire.sse import Frames, StreamError

log = logging.getLogger(__name__)
T = TypeVar("T")

# Hop-by-hop and framing headers: recomputed per connection, never forwarded.
_HOP = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "content-length",
                  "te", "trailer", "upgrade", "proxy-authorization", "proxy-connection",
                  "accept-encoding", "content-encoding"})


def _forward_headers(headers: Any) -> dict[str, str]:
    # Surrounding whitespace is not part of a header value (RFC 9110 5.5), and httpx
    # refuses to send one: lm-eval sends `Authorization: Bearer ` when no key is set.
    return {k: v.strip() for k, v in headers.items() if k.lower() not in _HOP}


def records_for(path: str, request: dict[str, Any], response: dict[str, Any],
                upstream: str, run: str, frames: list[str] | None = None) -> bytes:
    """The native record line(s) of one exchange (a batched completion: one per prompt,
    each with the batch's usage); a stream's frames are saved with it as they were sent
    (a streamed batch's are not: its prompts are replayed in small deltas)."""
    request = strip_transport(request)
    model = request.get("model") or response.get("model")
    source = {"harness": "replay-server record", "upstream": upstream, "run": run,
              "time": round(time.time(), 3)}
    parts = batch_parts(request, response, uuid.uuid4().hex) if family_of(path).batched \
        else [(request, response, None)]
    lines = []
    for part_request, part_response, batch in parts:
        record = make_record(path, model, part_request, part_response, source,
                             "(recording)", None, batch=batch,
                             stream=frames if batch is None else None)
        record.source = source  # file and line are where the reader finds the line
        lines.append(dump_line(record))
    return b"".join(lines)


class Recorder:
    def __init__(self, upstream: str, writer: RecordWriter) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.writer = writer
        self.run = f"record-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.counts: Counter[str] = Counter()
        self.client = httpx.AsyncClient(base_url=self.upstream, timeout=httpx.Timeout(
            None, connect=10.0))

    def summary(self) -> str:
        c = self.counts
        return (f"recorded {c['recorded']} exchanges ({c['records']} records) to "
                f"{self.writer.path}; forwarded without saving: {c['forwarded']}; "
                f"upstream errors: {c['upstream_error']}, abandoned by "
                f"the client: {c['abandoned']}, failed streams: {c['aborted']}, not "
                f"recordable: {c['unrecordable']}")

    async def _save(self, path: str, request: dict[str, Any], response: dict[str, Any],
                    frames: list[str] | None = None) -> None:
        try:
            lines = records_for(path, request, response, self.upstream, self.run, frames)
        except (LoadError, ValueError) as e:
            self.counts["unrecordable"] += 1
            log.warning("not recorded (%s): %s", path, e)
            return
        await self.writer.append(lines)
        self.counts["recorded"] += 1
        self.counts["records"] += lines.count(b"\n")

    async def forward(self, request: Request) -> Response:
        path = request.url.path
        body = await request.body()
        headers = _forward_headers(request.headers)
        headers["accept-encoding"] = "identity"
        parsed = _json_object(body)
        if parsed is not None and path in ENDPOINTS:  # (its headers that are fields, saved)
            parsed = family_of(path).with_headers(parsed, request.headers.raw)
        gone = asyncio.Event()
        watcher = asyncio.create_task(_watch_disconnect(request.receive, gone))
        try:
            reply = await _unless_gone(self.client.send(self.client.build_request(
                request.method, path, content=body, headers=headers,
                params=request.query_params), stream=True), gone)
        except httpx.HTTPError as e:
            watcher.cancel()
            self.counts["upstream_error"] += 1
            return _unreachable(self.upstream, e)
        if reply is None:
            watcher.cancel()
            return self._abandoned(path)
        out_headers = _forward_headers(reply.headers)
        recordable = request.method == "POST" and path in ENDPOINTS and parsed is not None \
            and reply.status_code == 200
        if recordable and parsed is not None and parsed.get("stream") is True:
            watcher.cancel()  # the relay watches the client itself
            return _Relay(self, path, parsed, reply, out_headers)
        try:
            content = await _unless_gone(reply.aread(), gone)
        except httpx.HTTPError as e:
            watcher.cancel()
            self.counts["upstream_error"] += 1
            return _unreachable(self.upstream, e)
        finally:
            await reply.aclose()
        watcher.cancel()
        if content is None or gone.is_set():
            return self._abandoned(path)
        if not recordable:
            if path in ENDPOINTS and request.method == "POST":
                self.counts["upstream_error" if reply.status_code != 200 else "unrecordable"] += 1
            else:
                self.counts["forwarded"] += 1
        elif (answer := _json_object(content)) is None:
            self.counts["unrecordable"] += 1
        else:
            await self._save(path, parsed or {}, answer)
        return Response(content, reply.status_code, out_headers)

    def _abandoned(self, path: str) -> Response:
        """The client left before its answer was complete: nothing is saved."""
        self.counts["abandoned"] += 1
        log.info("not recorded (%s): the client left before the answer was complete", path)
        return Response(status_code=499)

    async def save_stream(self, path: str, request: dict[str, Any],
                          aggregator: Aggregator, frames: Frames, ended: bool = False
                          ) -> bool:
        """Save a finished stream, with its frames as sent; once begun, the save completes
        even if cancelled. `ended`: the upstream's body ended cleanly before `[DONE]` (a
        chat or completion stream is then whole if each choice the request asked for came
        with its finish_reason; a Responses stream needs its terminal event all the same)."""
        try:
            response = aggregator.result(ended)
            if ended and "choices" in response and \
                    len(response["choices"]) != _choices_asked(path, request):
                raise StreamError("the stream ended before `data: [DONE]`, without "
                                  "every choice the request asked for")
        except StreamError as e:
            log.warning("stream not recorded (%s): %s", path, e)
            return False
        texts = frames.texts()
        if texts is None:
            log.warning("stream (%s) saved without its frames: they are not UTF-8", path)
        await asyncio.shield(self._save(path, request, response, texts))
        return True

    async def close(self) -> None:
        await self.client.aclose()


class _Relay(Response):
    """Passes an upstream stream through chunk by chunk, as it arrives, and saves it before
    its end goes out (`data: [DONE]`, or the end of a body that ended cleanly without it),
    unless the stream broke, was cut short, or the client left before its end."""

    def __init__(self, recorder: Recorder, path: str, request: dict[str, Any],
                 reply: httpx.Response, headers: dict[str, str]) -> None:
        # Not Response.__init__: that would add a content-length to a stream.
        self.status_code = reply.status_code
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                            for k, v in headers.items()]
        self.background = None
        self.recorder, self.path, self.request, self.reply = recorder, path, request, reply

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.Event()
        watcher = asyncio.create_task(_watch_disconnect(receive, gone))
        aggregator = family_of(self.path).aggregator()
        frames = Frames()
        saved = broken = False
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            async for chunk in _until(self.reply.aiter_bytes(), gone):
                if not (saved or broken):
                    try:
                        frames.feed(chunk)
                        if aggregator.feed(chunk) and not gone.is_set():
                            saved = await self.recorder.save_stream(self.path, self.request,
                                                                    aggregator, frames)
                            broken = not saved
                    except StreamError as e:
                        log.warning("stream not recorded (%s): %s", self.path, e)
                        broken = True
                if gone.is_set():
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            else:
                if not (saved or broken or gone.is_set()):
                    # the body ended cleanly without `[DONE]`: saved if it was whole
                    saved = await self.recorder.save_stream(self.path, self.request,
                                                            aggregator, frames, ended=True)
                await send({"type": "http.response.body", "body": b""})
        except (OSError, httpx.HTTPError) as e:
            log.warning("stream relay broken (%s): %s: %s", self.path, type(e).__name__, e)
        finally:
            watcher.cancel()
            await self.reply.aclose()
            if not saved:
                self.recorder.counts["abandoned" if gone.is_set() else "aborted"] += 1


def _choices_asked(path: str, request: dict[str, Any]) -> int:
    """How many choices a whole answer to `request` has: `n` per prompt (a completion's
    `prompt` may be a batch: a list of strings or of token-id lists)."""
    n = request.get("n")
    per_prompt = n if isinstance(n, int) and n > 0 else 1
    prompt = request.get("prompt") if family_of(path).batched else None
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        return per_prompt * len(prompt)
    return per_prompt


async def _unless_gone(work: Awaitable[T], gone: asyncio.Event) -> T | None:
    """`work`'s result, or None (and `work` cancelled) if the client leaves first."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if task.done():
        return task.result()
    task.cancel()
    return None


async def _until(chunks: AsyncIterator[bytes], gone: asyncio.Event) -> AsyncIterator[bytes]:
    """The upstream's chunks until it ends or the client leaves, whichever comes first: a
    client that leaves stops the read at once, so the upstream stops generating too."""
    stop = asyncio.ensure_future(gone.wait())
    try:
        while True:
            step = asyncio.ensure_future(anext(chunks))
            await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                step.cancel()
                return
            try:
                yield step.result()
            except StopAsyncIteration:
                return
    finally:
        stop.cancel()


async def _watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def probe(upstream: str, timeout: float = 5.0) -> str | None:
    """Why the upstream cannot be reached, or None: `GET /v1/models` there, where any
    answer at all (a 401 or a 404 too) says that a server listens."""
    try:
        httpx.get(f"{upstream}/v1/models", timeout=timeout)
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"
    return None


def _unreachable(upstream: str, error: Exception) -> Response:
    """502 in the OpenAI envelope. Unlike a replay error, retrying this can succeed, so it
    does not say `x-should-retry: false`."""
    unreachable = errors.BadGateway(f"the recorder could not reach the upstream server "
                                    f"{upstream}: {type(error).__name__}: {error}")
    return Response(orjson.dumps(unreachable.body()), unreachable.status,
                    media_type="application/json")


def create_record_app(recorder: Recorder) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await recorder.close()

    app = FastAPI(title="replay-server recorder", version=__version__, lifespan=lifespan)
    app.state.recorder = recorder

    async def forward(request: Request) -> Response:
        return await recorder.forward(request)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/record/status")
    async def status() -> Response:
        return Response(orjson.dumps({**recorder.counts, "file": str(recorder.writer.path)}),
                        media_type="application/json")

    # Everything else goes to the upstream, whatever the path and method: only the replay
    # endpoints' answers are saved.
    for path in ENDPOINTS:
        app.add_api_route(path, forward, methods=["POST"], include_in_schema=True)
    app.add_api_route("/{path:path}", forward, methods=_METHODS, include_in_schema=False)
    return app


_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
