"""A connection's writes in one step of the event loop leave together, at the step's end.

uvicorn writes a response's head and its body apart, each the moment it is made: two
system calls a response, and, with many connections, a client woken for every one of
them. `StepWrites` holds what a connection writes during one step of the event loop and
hands it to the transport when the step ends, in one call (one `writev` on uvloop): every
request that was ready in that step is answered first, then every answer leaves. The bytes
are the same and in the same order; nothing is held past the step in which it was written.
Only asyncio's public transport interface: it is a transport itself, around the real one.
"""

from __future__ import annotations

import asyncio
from typing import Any


class StepWrites:
    """A transport whose writes wait for the end of the current step of the event loop
    (one `call_soon` a connection a step), then leave in one call, in order. Closing
    sends what is held first; aborting, or a connection already closing when the step
    ends (the client left), drops it. Everything else is the transport's."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def writelines(self, data: Any) -> None:
        for item in data:
            self.write(item)

    def flush(self) -> None:
        """Hand what is held to the transport now (dropped if the connection is closing)."""
        held = self._held
        if not held:
            return
        self._held = []
        if self._transport.is_closing():
            return  # the connection is gone: no one to send it to
        if len(held) == 1:
            self._transport.write(held[0])
        else:
            self._transport.writelines(held)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = []
        self._transport.abort()

    def is_closing(self) -> bool:  # asked on every request: not through __getattr__
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(d) for d in self._held)

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's
        return getattr(self._transport, name)
