"""A connection's writes in one step of the event loop leave together, at the step's end.

uvicorn writes a response's head and its body apart, each the moment it is made: two
system calls a response, and, with many connections, a client woken for every one of
them. `StepWrites` holds what a connection writes during one step of the event loop and
hands it to the transport when the step ends, in one call (one `writev` on uvloop): every
request that was ready in that step is answered first, then every answer leaves. The bytes
are the same and in the same order; nothing is held past the step in which it was written.
Only asyncio's public transport interface: it is a transport itself, around the real one.

Since only it knows when an answer leaves, it also says whether it did (`when_sent`): the
replay endpoints hand a saved sample over only once its answer was handed to an open
connection, and give it back otherwise (a client gone first must not use up a sample).
The protocol offers that to the app as an ASGI scope extension (`SENT`); `when_sent`
below is how the app asks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

SENT = "replay_server.sent"
"""The scope extension by which the protocol says whether an answer left
(`{"when_sent": StepWrites.when_sent}`)."""

Sent = Callable[[bool], None]


def when_sent(scope: Mapping[str, Any], callback: Sent) -> None:
    """Call `callback(delivered)` once what the app wrote for this request so far has
    left or could not leave. A server that does not say (no `SENT` extension: any other
    ASGI server, a test client) is taken at its word that what was sent was delivered."""
    extension = scope.get("extensions", {}).get(SENT)
    if extension is None:
        callback(True)
    else:
        extension["when_sent"](callback)


class StepWrites:
    """A transport whose writes wait for the end of the current step of the event loop
    (one `call_soon` a connection a step), then leave in one call, in order. Closing
    waits for what is held to leave at the step's end (it is closing from the call on);
    aborting, or a connection already closing when the step ends (the client left),
    drops it. Everything else is the transport's.

    Delivered, for `when_sent`, means handed whole to the connection while it was open
    (the kernel, or the transport's own buffer): TCP never tells a server whether the
    client read it, so a client that closed its socket unread in time for that is not
    seen."""

    __slots__ = ("_transport", "_loop", "_held", "_waiting", "_closing")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._waiting: list[Sent] = []
        self._closing = False  # closed, once what is held has left

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def writelines(self, data: Any) -> None:
        for item in data:
            self.write(item)

    def when_sent(self, callback: Sent) -> None:
        """Call `callback(delivered)` when what is held leaves (True) or is dropped (False);
        nothing held: what the app sent was never written (the connection was lost)."""
        if self._held:
            self._waiting.append(callback)
        else:
            callback(False)

    def flush(self) -> None:
        """Hand what is held to the transport now (dropped if the connection is closing)."""
        held = self._held
        if not held:
            return
        self._held = []
        transport = self._transport
        if not transport.is_closing():  # else the connection is gone: no one to send it to
            if len(held) == 1:
                transport.write(held[0])
            else:
                transport.writelines(held)
        delivered = not transport.is_closing()  # (a write that failed at once closed it)
        if self._closing:
            transport.close()
        if self._waiting:
            self._tell(delivered)

    def _tell(self, delivered: bool) -> None:
        waiting, self._waiting = self._waiting, []
        for callback in waiting:
            callback(delivered)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        if self._held:  # (so that an answer's `when_sent` in this step still hears of it)
            self._closing = True
        else:
            self._transport.close()

    def abort(self) -> None:
        self._held = []
        self._tell(False)
        self._transport.abort()

    def is_closing(self) -> bool:  # asked on every request: not through __getattr__
        return self._closing or self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(d) for d in self._held)

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's
        return getattr(self._transport, name)
