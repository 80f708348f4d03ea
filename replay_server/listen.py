"""Where the servers listen: a bound socket, and uvicorn run the one way they all use.

Every server here (serve, run, the workers, the recorder) runs uvicorn with httptools and
`SlowClientProtocol`, which cuts off a client that does not send a whole request (headers
and body) in time, and sends each answer's head and body in one send (`OneSend`). Both
are on every request: they must cost it next to nothing, and never change a byte sent.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .settings import DEFAULT_READ_TIMEOUT, Settings


def bind(host: str, port: int) -> tuple[socket.socket, str]:
    """A listening socket (port 0 picks a free one) and the /v1 base URL it serves."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    bound_host, bound_port = sock.getsockname()[:2]
    # bound to every address: show the one a client on this machine can use
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(bound_host, bound_host)
    shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
    return sock, f"http://{shown}:{bound_port}/v1"


class SlowClientProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, but a client that has not sent a whole request (headers and
    body) within `read_timeout` seconds of connecting (or of starting the request) is cut
    off: a trickled request would otherwise hold the connection forever.

    A request only notes when it began; the one timer of a connection is not re-armed per
    request (a timer armed and cancelled on every request costs more than the rest of this
    class). When it fires it cuts off a request that is late, waits again for one still
    in time, and lapses on an idle connection (the next request arms it again).
    """

    read_timeout: float = DEFAULT_READ_TIMEOUT
    _began: float | None = None  # when the unfinished request (or the connection) began
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(OneSend(transport, self.loop))  # type: ignore[arg-type]
        self._began = self.loop.time()
        self._arm(self.read_timeout)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._began is None:  # else the request began when the connection did
            self._began = self.loop.time()
            if self._deadline is None:
                self._arm(self.read_timeout)

    def on_message_complete(self) -> None:
        self._began = None
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._began = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def _arm(self, delay: float) -> None:
        self._deadline = self.loop.call_later(delay, self._check)

    def _check(self) -> None:
        self._deadline = None
        if self._began is None:
            return  # idle between requests: the next one arms the timer again
        left = self._began + self.read_timeout - self.loop.time()
        if left > 0:
            self._arm(left)
        elif not self.transport.is_closing():
            self.transport.close()


class OneSend:
    """A transport that sends a response's head together with its body, in one send
    rather than two: uvicorn writes them apart, and each send costs a system call, a
    packet and a wake-up of the client (on loopback about 3 us of server time, and 14 us
    of a lone client's wait, a request). A head that no write follows in the same step of
    the event loop (a stream whose first event is not ready) is sent at the end of that
    step, so nothing waits; the bytes sent are the same, in the same order."""

    __slots__ = ("_transport", "_held", "_step")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._held: bytes | None = None
        self._step = _step_of(loop)

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= _JOIN_AT_MOST:
                self._transport.write(held + data)
                return
            self._transport.write(held)  # a big body is not copied to join it
        elif data.startswith(b"HTTP/") and data.endswith(b"\r\n\r\n"):
            self._held = data  # a response head: its body is usually written next
            self._step.hold(self)
            return
        self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def writelines(self, data: Iterable[bytes]) -> None:
        self.write(b"".join(data))

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def is_closing(self) -> bool:  # asked on every request: not through __getattr__
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's
        return getattr(self._transport, name)


_JOIN_AT_MOST = 64 * 1024


class _Step:
    """The transports of one event loop that hold a head, flushed at the end of the
    loop's current step: one callback a step, however many answers it sends."""

    __slots__ = ("loop", "held", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self.held: list[OneSend] = []

    def hold(self, sender: OneSend) -> None:
        if not self.held:
            loop = self.loop()
            assert loop is not None  # a transport of a loop gone writes nothing
            loop.call_soon(self.flush)
        self.held.append(sender)

    def flush(self) -> None:
        held, self.held = self.held, []
        failed: Exception | None = None
        for sender in held:
            try:
                sender.flush()
            except Exception as e:  # one broken transport never keeps the others' heads
                failed = failed or e
        if failed is not None:
            raise failed  # to the loop's exception handler, as a write's error would go


_STEPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Step] = \
    weakref.WeakKeyDictionary()


def _step_of(loop: asyncio.AbstractEventLoop) -> _Step:
    step = _STEPS.get(loop)
    if step is None:
        step = _STEPS[loop] = _Step(loop)
    return step


def uvicorn_config(app: Any, log_level: str, access_log: bool,
                   read_timeout: float = DEFAULT_READ_TIMEOUT, **more: Any) -> uvicorn.Config:
    """How every server here runs uvicorn: httptools with the slow-client cut-off."""
    SlowClientProtocol.read_timeout = read_timeout
    return uvicorn.Config(app, log_level=log_level, access_log=access_log,
                          http=SlowClientProtocol, timeout_graceful_shutdown=30, **more)


class _Stop:
    """Whether uvicorn is serving (it then handles SIGTERM itself), and whether a SIGTERM
    came while it was starting."""

    serving = False
    requested = False


def _on_sigterm(signum: int, frame: Any) -> None:
    if not _Stop.serving:
        raise KeyboardInterrupt  # loading: stop now, as Ctrl-C does
    _Stop.requested = True  # uvicorn drains and returns, or is told to at startup


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the command as SIGINT does, while this lasts: before serving it
    raises KeyboardInterrupt; while uvicorn serves, uvicorn drains the requests in flight
    and returns, and the caller finishes its work (a summary, exit status 0) rather than
    being killed by the signal uvicorn raises again. No exception is ever raised from the
    handler while the event loop runs."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are the main thread's
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if _Stop.requested:  # a SIGTERM before uvicorn took the signal over
            self.should_exit = True


def run_uvicorn(app: Any, sock: socket.socket, settings: Settings) -> None:
    """Serve until SIGINT or SIGTERM; in-flight requests are drained first."""
    _Stop.serving = True  # a SIGTERM from here on stops uvicorn as soon as it has started
    try:
        config = uvicorn_config(app, settings.log_level, settings.access_log,
                                settings.read_timeout)
        _Server(config).run(sockets=[sock])
    finally:
        _Stop.serving = False


