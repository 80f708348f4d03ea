"""Where the servers listen: a bound socket, and uvicorn run the one way they all use.

Every server here (serve, run, the workers, the recorder) runs uvicorn with httptools and
`SlowClientProtocol`, which cuts off a client that does not send a whole request (headers
and body) in time, and sends each answer's head and body in one send (`OneSend`). Both
are on every request: they must cost it next to nothing, and never change a byte sent.
It also answers the replay POSTs of a `ReplayApp` itself (`Direct`): uvicorn's ASGI cycle
costs more than the replay work, and these answers are known whole at once. They must be
the bytes uvicorn would send for the ASGI app's answer; anything else goes to the app.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
)

from ..settings import DEFAULT_READ_TIMEOUT, Settings
from .app import Answer, ReplayApp, ReplayEndpoint

log = logging.getLogger(__name__)


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


DIRECT = True
"""Whether `SlowClientProtocol` answers the replay endpoints itself (tests turn it off to
compare with the ASGI path; it is read when a connection is made)."""


def _uvicorn_as_expected() -> bool:
    """Whether uvicorn's HTTP protocol is the one the direct answers were written against
    (they reuse its parser callbacks, state and response completion)."""
    known = uvicorn.__version__.split(".")[:2] == ["0", "54"]
    parts = all(hasattr(HttpToolsProtocol, name) for name in (
        "on_response_complete", "_unset_keepalive_if_required", "on_headers_complete",
        "on_body", "on_message_complete", "shutdown", "data_received",
        "timeout_keep_alive_handler"))
    if not (known and parts):
        log.debug("uvicorn %s is not the one (0.54) whose HTTP protocol listen.py knows: "
                  "every request goes through the ASGI app", uvicorn.__version__)
    return known and parts


_UVICORN_AS_EXPECTED = _uvicorn_as_expected()


class SlowClientProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, but a client that has not sent a whole request (headers and
    body) within `read_timeout` seconds of connecting (or of starting the request) is cut
    off: a trickled request would otherwise hold the connection forever.

    A request only notes when it began; the one timer of a connection is not re-armed per
    request (a timer armed and cancelled on every request costs more than the rest of this
    class). When it fires it cuts off a request that is late, waits again for one still
    in time, and lapses on an idle connection (the next request arms it again).

    It also answers a POST to a replay endpoint of a `ReplayApp` itself (`Direct`), with the
    same bytes uvicorn writes for the ASGI path, without its per-request cycle, task, event
    and messages; anything else or anything unusual goes through the ASGI app.
    """

    read_timeout: float = DEFAULT_READ_TIMEOUT
    _began: float | None = None  # when the unfinished request (or the connection) began
    _deadline: asyncio.TimerHandle | None = None
    _direct: Direct | None = None  # None: every request goes through the ASGI app

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sender = OneSend(transport, self.loop)
        super().connection_made(sender)  # type: ignore[arg-type]
        self._began = self.loop.time()
        self._arm(self.read_timeout)
        self._direct = Direct.of(self, sender)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._direct is not None:
            self._direct.idle_since = None  # a request runs: not idle, whatever it is
        if self._began is None:  # else the request began when the connection did
            self._began = self.loop.time()
            if self._deadline is None:
                self._arm(self.read_timeout)

    def on_headers_complete(self) -> None:
        direct = self._direct
        if direct is not None:
            if direct.take(self.url):
                return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        direct = self._direct
        if direct is not None and direct.mine:
            direct.body(body)
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._began = None
        direct = self._direct
        if direct is not None and direct.mine:
            direct.complete()
        else:
            super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        direct = self._direct
        if direct is not None:
            direct.idle_since = None  # as uvicorn cancels its keep-alive timer
        super().data_received(data)
        if direct is not None and direct.mine:
            direct.received()

    def shutdown(self) -> None:
        direct = self._direct
        if direct is not None and direct.mine and not direct.answered:
            direct.keep_alive = False  # answered, then closed: as uvicorn ends a request
            return
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        self._began = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._direct is not None:
            self._direct.lost()
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


class Direct:
    """The replay POSTs of one connection, answered from uvicorn's parser callbacks: the
    headers (`take`), the body (`body`, `received`), the end (`complete`), with
    `ReplayEndpoint.start` and `finish`, the same synchronous work as the ASGI path. The
    answer leaves in one write, the bytes uvicorn would write for it (`wire`); then what
    uvicorn does when a response completes (`_completed`: keep-alive timer, reading
    resumed). An answer uvicorn would refuse closes the connection, as uvicorn
    does, and the requests after it in the same read are dropped, as uvicorn never
    starts them.

    A request is taken only when the ASGI path would do exactly the same with it: an
    HTTP/1.1 POST to the exact path of a replay endpoint, no `Expect: 100-continue`, no
    upgrade, no response of the connection in flight (pipelined requests keep their
    order), writing not paused. A connection is served so at all only with this module's
    switch on, a uvicorn as expected, no access log, no concurrency limit, no root path,
    and a `ReplayApp` (behind uvicorn's proxy-headers middleware at most, which changes
    nothing these endpoints read)."""

    __slots__ = ("protocol", "sender", "paths", "mine", "endpoint", "answered",
                 "keep_alive", "parts", "size", "idle_since", "idle_timer")

    def __init__(self, protocol: SlowClientProtocol, sender: OneSend,
                 paths: dict[bytes, ReplayEndpoint]) -> None:
        self.protocol = protocol
        self.sender = sender
        self.paths = paths
        self.mine = False  # whether the request being received is taken here
        self.endpoint: ReplayEndpoint | None = None  # its endpoint (None: dropped)
        self.answered = False  # whether it was answered (or dropped) before its body ended
        self.keep_alive = True
        self.parts: list[bytes] = []
        self.size = 0
        self.idle_since: float | None = None  # when the last answer left, if nothing came since
        self.idle_timer: asyncio.TimerHandle | None = None

    @classmethod
    def of(cls, protocol: SlowClientProtocol, sender: OneSend) -> Direct | None:
        if not (DIRECT and _UVICORN_AS_EXPECTED) or protocol.access_log \
                or protocol.limit_concurrency is not None or protocol.root_path:
            return None
        app = protocol.app
        if type(app) is ProxyHeadersMiddleware:
            app = app.app
        if not isinstance(app, ReplayApp):
            return None  # the recorder's proxy, a wrapped app: ASGI
        return cls(protocol, sender, {path.encode(): endpoint
                                      for path, endpoint in app.fast_paths.items()})

    def take(self, url: bytes) -> bool:
        """Whether this request is taken here (then it has begun: counted, and answered
        already if its headers decide it). Any request on a connection closed by an
        answer sent earlier in the same read is dropped (uvicorn would not start it)."""
        if self.sender.is_closing():
            self.mine = self.answered = True
            self.endpoint = None
            return True
        endpoint = self.paths.get(url)
        if endpoint is None:  # a query string is ignored, as the ASGI app ignores it
            path, query, _ = url.partition(b"?")
            endpoint = self.paths.get(path) if query and b"#" not in url else None
            if endpoint is None:
                return False
        protocol = self.protocol
        parser = protocol.parser
        cycle = protocol.cycle
        if parser.get_method() != b"POST" or parser.get_http_version() != "1.1" \
                or protocol.expect_100_continue or parser.should_upgrade() \
                or (cycle is not None and not cycle.response_complete) \
                or protocol.flow.write_paused:
            return False
        self.mine = True
        self.endpoint = endpoint
        self.answered = False
        self.keep_alive = parser.should_keep_alive()
        answer = endpoint.start(protocol.headers)
        if answer is not None:
            self._send(answer)
        return True

    def body(self, data: bytes) -> None:
        if not self.answered:
            self.parts.append(data)
            self.size += len(data)

    def received(self) -> None:
        """After each read: a body past the limit is refused without waiting for its end
        (as the ASGI path refuses it when it has received that much)."""
        endpoint = self.endpoint
        if not self.answered and endpoint is not None and self.size > endpoint.max_body \
                and not self.sender.is_closing():
            self._send(endpoint.failed(endpoint.too_large(self.size)))

    def complete(self) -> None:
        endpoint = self.endpoint
        self.mine = False
        self.endpoint = None
        if self.answered or endpoint is None:
            return
        parts = self.parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self.parts = []
        self.size = 0
        self._send(endpoint.finish(body))

    def _send(self, answer: Answer) -> None:
        self.answered = True
        self.parts = []
        self.size = 0
        protocol = self.protocol
        try:
            data = wire(protocol.server_state.default_headers, answer, self.keep_alive)
        except ValueError as exc:  # uvicorn would refuse it too, and close
            log.error("an answer uvicorn would not send: %s", exc)
            self.sender.close()
            return
        self.sender.send(data)
        if not self.keep_alive:
            self.sender.close()
        self._completed()

    def _completed(self) -> None:
        """What uvicorn's `on_response_complete` does (no request waits behind a direct
        answer), but its keep-alive timer is not armed per answer (that costs more than
        a microsecond): the answer notes when it left, and the one timer, when it fires,
        closes a connection idle for `timeout_keep_alive` seconds since, waits again for
        one idle for less, and lapses on one that received since (an answer re-arms it)."""
        protocol = self.protocol
        protocol.server_state.total_requests += 1
        if self.sender.is_closing():
            return
        protocol._unset_keepalive_if_required()  # uvicorn's, should an ASGI answer have armed it
        protocol.flow.resume_reading()
        self.idle_since = protocol.loop.time()
        if self.idle_timer is None:
            self.idle_timer = protocol.loop.call_later(protocol.timeout_keep_alive,
                                                       self._idle)

    def _idle(self) -> None:
        self.idle_timer = None
        since = self.idle_since
        if since is None:
            return  # it received since: busy, or a request under way
        protocol = self.protocol
        left = since + protocol.timeout_keep_alive - protocol.loop.time()
        if left > 0:
            self.idle_timer = protocol.loop.call_later(left, self._idle)
        else:
            protocol.timeout_keep_alive_handler()

    def lost(self) -> None:
        """The connection is gone: a client gone mid-body gets nothing."""
        self.mine = False
        self.idle_since = None
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None


def wire(defaults: list[tuple[bytes, bytes]], answer: Answer, keep_alive: bool) -> bytes:
    """The bytes uvicorn writes for `answer` sent as one start and one body message
    (`RequestResponseCycle.send`), with its default headers `defaults`."""
    status, headers, body = answer
    head, chunked = _head(defaults, status, headers, len(body), keep_alive)
    if chunked:  # one chunk, then the last (join: `%` copies a big body slowly)
        return b"".join((head, b"%x\r\n" % len(body), body, b"\r\n0\r\n\r\n")) if body \
            else head + b"0\r\n\r\n"
    return head + body


def _head(defaults: list[tuple[bytes, bytes]], status: int,
          headers: list[tuple[bytes, bytes]], length: int, keep_alive: bool
          ) -> tuple[bytes, bool]:
    """The head uvicorn writes for a response of `length` bytes sent in one body message
    (`RequestResponseCycle.send`): status line, its default headers then the answer's,
    lower-cased, `connection: close` unless kept alive, and chunked framing without a
    Content-Length (then True). Raises ValueError where uvicorn would refuse the
    response."""
    content = [STATUS_LINE[status], _defaults(defaults)]
    sized = False
    for header in headers:
        line = _LINES.get(header)
        if line is None:
            name, value = header
            if name == b"content-length" and value.isdigit():  # nothing to check
                line = b"content-length: %s\r\n" % value
            else:
                line = _line(header)
        if line.startswith(b"content-length: ") and not sized:
            if int(header[1]) != length:
                raise ValueError(f"content-length {header[1]!r} for {length} bytes")
            sized = True
        content.append(line)
    if not keep_alive:
        content.append(b"connection: close\r\n")
    chunked = not sized and status not in (204, 304)
    if chunked:
        content.append(b"transfer-encoding: chunked\r\n")
    content.append(b"\r\n")
    return b"".join(content), chunked


_LINES: dict[tuple[bytes, bytes], bytes] = {}  # header -> its checked line, as uvicorn writes it


def _line(header: tuple[bytes, bytes]) -> bytes:
    """A header's line, checked as uvicorn checks it (remembered: the same headers come
    back, `content-type` every time, `x-replay-source` every time its record is served;
    two regular expressions cost more than a look-up)."""
    name, value = header
    if HEADER_RE.search(name) or HEADER_VALUE_RE.search(value):
        raise ValueError(f"invalid header {name!r}: {value!r}")
    name = name.lower()
    if name in (b"transfer-encoding", b"connection"):
        raise ValueError(f"a {name!r} header")  # the answers here never set one
    line = b"%s: %s\r\n" % (name, value)
    if len(_LINES) >= 10_000:
        _LINES.clear()  # the ones in use come back
    _LINES[header] = line
    return line


_defaults_seen: tuple[list[tuple[bytes, bytes]], bytes] | None = None


def _defaults(defaults: list[tuple[bytes, bytes]]) -> bytes:
    """uvicorn's default headers (`date`, `server`, --header) as it writes them; made
    once a second (uvicorn makes a new list when the date changes)."""
    global _defaults_seen
    seen = _defaults_seen
    if seen is not None and seen[0] is defaults:
        return seen[1]
    for name, value in defaults:
        if HEADER_RE.search(name) or HEADER_VALUE_RE.search(value):
            raise ValueError(f"invalid header {name!r}: {value!r}")
    made = b"".join(b"%s: %s\r\n" % (name.lower(), value) for name, value in defaults)
    _defaults_seen = (defaults, made)
    return made


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

    def send(self, data: bytes) -> None:
        """Write a whole response (head and body) now, after any head held."""
        self.flush()
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


GRACE_S = 10.0  # how long a server in a thread has to drain before it is left


class InThread:
    """A server in a background thread of this process, on a free port: `run` serves the
    saved run there while COMMAND runs."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.sock, self.base_url = bind(settings.host, settings.port)
        config = uvicorn_config(app, settings.log_level, settings.access_log,
                                settings.read_timeout)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    def __enter__(self) -> InThread:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise OSError("the replay server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(GRACE_S)
        self.sock.close()
