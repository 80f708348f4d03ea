"""uvicorn's HTTP protocol (httptools), with what it lacks. Quarantined.

Why this module exists: uvicorn has no public way to bound how long a client takes to send
a request, nor to keep chunked trailers out of the headers an app reads, and both are
holes a client can use:

- a client that trickles a request, or sends bytes that begin none (a lone CRLF between
  requests), holds its connection for ever: uvicorn cancels its keep-alive timer on any
  byte received, and has no read timeout;
- the parser reports a chunked body's trailer fields through the callback of header
  fields, and uvicorn appends them to the very list the app reads as the headers: an
  `Authorization` trailer (RFC 9110 6.5.1: not a header) passes for the header whenever
  the whole request is in before the app looks;
- at the end of the client's stream uvicorn closes the connection at once, dropping the
  answers to the requests pipelined before it: a client that half-closes (shuts its
  sending side once its requests are out) is done sending, not reading, and each of those
  requests had already taken its saved sample.

`GuardedProtocol` extends uvicorn's internal `HttpToolsProtocol` (four parser callbacks;
its `headers`, `scope`, `loop`, `transport`, and `shutdown`, which answers what was received
and then closes), and hands it a transport whose writes leave once a step of the event
loop (`writes.StepWrites`, public asyncio only), which says whether each answer left (the
`writes.SENT` extension of every request's scope). It is the one module
allowed a dependency's internals (tests/test_layers.py) and stays short (a test says so),
so that a new uvicorn has one small place to be checked against; everything else about
HTTP is uvicorn's. The base class's methods are called directly, not through `super()`:
this is on every request.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base

from ..settings import DEFAULT_READ_TIMEOUT
from .writes import SENT, StepWrites


class GuardedProtocol(Base):
    """uvicorn's HTTP protocol, but from its first byte (or from the connection), a
    request has `read_timeout` seconds to arrive whole, or the connection is closed (a
    byte that begins no request, a stray CRLF, starts that clock too); and once the
    headers are complete, the list the app holds is closed to the parser (trailer fields
    go to a copy no one reads).

    The one timer of a connection is not re-armed per request (a timer armed and cancelled
    on every request costs more than the rest of this class): a request only notes when
    it began, and the timer, when it fires, cuts off a request that is late, waits again
    for one still in time, and lapses on an idle connection (the next byte arms it).

    The end of the client's stream (a half-close, or a close: they look alike) between
    requests is no abort: each request received is answered, then the connection closes.
    Within a request, it is: that request can never be whole, and the connection closes at
    once (an answer still due is undelivered, the request cut off in flight). So it is
    when the request under way has read its body and its answer is not done: it waits on
    something else (an upstream), and a client whose timeout closed its socket must not
    have an answer it never saw recorded."""

    read_timeout: float = DEFAULT_READ_TIMEOUT
    _began: float | None = None  # when the unfinished request (or stray bytes) began
    _deadline: asyncio.TimerHandle | None = None
    _in_request = False  # between a request's first byte and its last
    _writes: StepWrites
    _extensions: dict[str, dict[object, object]]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._writes = StepWrites(transport, self.loop)
        self._extensions = {SENT: {"when_sent": self._writes.when_sent}}
        Base.connection_made(self, self._writes)  # type: ignore[arg-type]
        self._begin()

    def data_received(self, data: bytes) -> None:
        if self._began is None:
            self._begin()
        Base.data_received(self, data)

    def eof_received(self) -> bool:  # type: ignore[override]  # asyncio's: True keeps it open
        self._writes.flush()  # what the step wrote goes before anything closes
        cycle = self.cycle  # the last request (the one under way, unless some wait behind)
        if self._in_request or (cycle is not None and not cycle.response_complete
                                and not cycle.message_event.is_set()):
            return False  # cut off, or gone: the transport closes, the request is disconnected
        Base.shutdown(self)  # the last answer closes the connection (now, if none is due)
        return True  # (the sending side stays open until then)

    def on_message_begin(self) -> None:
        Base.on_message_begin(self)
        self._in_request = True
        if self._began is None:  # pipelined: it began in the read that ended the last one
            self._begin()

    def on_headers_complete(self) -> None:
        Base.on_headers_complete(self)
        self.headers = list(self.headers)  # the scope keeps the list uvicorn filled
        self.scope["extensions"] = self._extensions

    def on_message_complete(self) -> None:
        self._began = None
        self._in_request = False
        Base.on_message_complete(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._began = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        Base.connection_lost(self, exc)

    def _begin(self) -> None:
        self._began = self.loop.time()
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.read_timeout, self._check)

    def _check(self) -> None:
        self._deadline = None
        if self._began is None:
            return  # idle between requests: uvicorn's keep-alive timer watches it
        left = self._began + self.read_timeout - self.loop.time()
        if left > 0:
            self._deadline = self.loop.call_later(left, self._check)
        elif not self.transport.is_closing():
            self.transport.close()

