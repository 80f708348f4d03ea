"""Where the servers listen: a bound socket, and uvicorn run the one way they all use.

Every server here (serve, run, the workers, the recorder) runs uvicorn with httptools and
`guarded.GuardedProtocol`: a client that does not send a whole request in time is cut
off, and a chunked trailer never passes for a header. Only public interfaces of uvicorn
here (`Config`, `Server`); the protocol is the one quarantined use of its internals.
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from ..settings import DEFAULT_READ_TIMEOUT, Settings
from ..wire.credentials import query_without_keys
from .guarded import GuardedProtocol


def bind(host: str, port: int) -> tuple[socket.socket, str]:
    """A listening socket (port 0 picks a free one) and the /v1 base URL it serves."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        error = OSError(_cannot_listen(host, port, e))
        error.errno = e.errno
        raise error from None
    bound_host, bound_port = sock.getsockname()[:2]
    # bound to every address: show the one a client on this machine can use
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(bound_host, bound_host)
    shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
    return sock, f"http://{shown}:{bound_port}/v1"


def _cannot_listen(host: str, port: int, error: OSError) -> str:
    """What a user needs when a port cannot be had: which address, why, what to do (a
    bare "[Errno 98] Address already in use" names neither the port nor the flag)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    why = "the port is in use (another server?)" if error.errno == errno.EADDRINUSE \
        else (error.strerror or str(error))
    return (f"cannot listen on {where}: {why}; choose another port with --port PORT "
            "(serve and run also read REPLAY_SERVER_PORT; `make serve PORT=PORT`), or "
            "--port 0 for any free one")


def uvicorn_config(app: Any, log_level: str, access_log: bool,
                   read_timeout: float = DEFAULT_READ_TIMEOUT, **more: Any) -> uvicorn.Config:
    """How every server here runs uvicorn: httptools, guarded (`http` takes a protocol
    class, which uvicorn builds for each connection: the timeout is the class's). No
    X-Forwarded-* headers: nothing here reads a client's address, and uvicorn's
    middleware for them would wrap every request."""
    GuardedProtocol.read_timeout = read_timeout
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log,
                            http=GuardedProtocol, timeout_graceful_shutdown=30,
                            proxy_headers=False, **more)
    logging.getLogger("uvicorn.access").addFilter(_KEYS_LEFT_OUT)  # (once: a filter is a set)
    return config


class _KeysLeftOut(logging.Filter):
    """The access log (`--access-log`) prints each request's path with its query: a key
    sent there (`?key=`, Google's clients send theirs so) is never printed. Any argument of
    a record that holds a query loses its key-like parameters (`credentials`); the record
    is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_without_keys(a) if isinstance(a, str) and "?" in a else a
                                for a in record.args)
        return True


def _without_keys(path: str) -> str:
    path, _, query = path.partition("?")
    query = query_without_keys(query)
    return f"{path}?{query}" if query else path


_KEYS_LEFT_OUT = _KeysLeftOut()


class _Stop:
    """What SIGINT and SIGTERM asked while `stop_signals` lasts."""

    loading = True  # until `loaded`: a signal interrupts what is being done
    requested = False


def _on_signal(signum: int, frame: Any) -> None:
    _Stop.requested = True
    if _Stop.loading:
        raise KeyboardInterrupt  # loading: stop now


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT and SIGTERM stop the command, while this lasts. While it loads, a signal
    raises KeyboardInterrupt; from `loaded` on (the ready line), it only asks the server to
    stop: uvicorn, once serving, drains the requests in flight and returns, and the caller
    finishes its work (a summary, exit status 0). Only a request, never an exception,
    once loaded: Python drops an exception that a signal raises inside a collector's
    callback, which left a server serving on after its Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are the main thread's
        return
    _Stop.loading, _Stop.requested = True, False
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def loaded() -> None:
    """From here on, a signal asks the server to stop (`stop_requested`) rather than
    interrupting: called before the ready line."""
    _Stop.loading = False


def stop_requested() -> bool:
    """Whether SIGINT or SIGTERM came (while `stop_signals` lasts)."""
    return _Stop.requested


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if _Stop.requested:  # a signal before uvicorn took the signals over
            self.should_exit = True


def run_uvicorn(app: Any, sock: socket.socket, settings: Settings) -> None:
    """Serve until SIGINT or SIGTERM (one that came already, since `loaded`, included);
    in-flight requests are drained first."""
    if _Stop.requested:
        return
    config = uvicorn_config(app, settings.log_level, settings.access_log,
                            settings.read_timeout)
    _Server(config).run(sockets=[sock])


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
