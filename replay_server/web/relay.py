"""The recording proxy's stream relay: an upstream stream passed through to the client chunk
by chunk, as it arrives; and the watch on the client that stops the upstream's work the
moment the client leaves (a stream's read, or an unstreamed answer's: `unless_gone`).

Each chunk goes out as soon as it arrives, but the one that completes the stream, which
waits until the recorder has saved it (`Recorder.save_stream`): an exchange a client saw
whole is on disk. What a stream must hold to be saved, and the saving, are the recorder's
(web/recorder.py); the relay tells it when a stream completed, and counts one that did
not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from ..wire.families import family_of
from ..wire.sse import Frames, StreamError

if TYPE_CHECKING:  # (the recorder makes a relay: a name for its type only)
    from .recorder import Outcome, Recorder

log = logging.getLogger(__name__)
T = TypeVar("T")


class Relay(Response):
    """Passes an upstream stream through chunk by chunk, as it arrives, and saves it before
    its end goes out (`data: [DONE]`, or the end of a body that ended cleanly without it),
    unless the stream broke, was cut short, or the client left before its end."""

    def __init__(self, recorder: Recorder, path: str, request: dict[str, Any],
                 reply: httpx.Response, headers: dict[str, str], hook: Outcome | None,
                 model: str | None = None) -> None:
        # Not Response.__init__: that would add a content-length to a stream.
        self.status_code = reply.status_code
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                            for k, v in headers.items()]
        self.background = None
        self.recorder, self.path, self.request, self.reply = recorder, path, request, reply
        self.hook = hook
        self.model = model  # the model the request's path names (Gemini's), if it does

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.Event()
        watcher = asyncio.create_task(watch_disconnect(receive, gone))
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
                            saved = await self.recorder.save_stream(
                                self.path, self.request, aggregator, frames, hook=self.hook,
                                model=self.model)
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
                    saved = await self.recorder.save_stream(
                        self.path, self.request, aggregator, frames, ended=True,
                        hook=self.hook, model=self.model)
                await send({"type": "http.response.body", "body": b""})
        except (OSError, httpx.HTTPError) as e:
            log.warning("stream relay broken (%s): %s: %s", self.path, type(e).__name__, e)
        finally:
            watcher.cancel()
            await self.reply.aclose()
            if not saved:
                self.recorder.tally(*(("abandoned", "the client left before the stream's end")
                                      if gone.is_set() else
                                      ("aborted", "the upstream's stream broke or was cut "
                                       "short, or cannot be saved")), self.hook)


async def unless_gone(work: Awaitable[T], gone: asyncio.Event) -> T | None:
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


async def watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    """Set `gone` once the client leaves (its `http.disconnect`)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()
