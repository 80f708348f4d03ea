"""listen: the socket a server binds, and what a user reads when it cannot."""

from __future__ import annotations

import signal
import socket
import subprocess

import httpx
import pytest

from replay_server.settings import Settings
from replay_server.web import listen
from tests.support import CLI, ROOT, spawn


@pytest.fixture
def busy() -> socket.socket:
    """A port another program listens on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_busy_port_names_the_address_and_how_to_choose_another(busy: socket.socket
                                                                  ) -> None:
    port = busy.getsockname()[1]
    with busy, pytest.raises(OSError) as e:
        listen.bind("127.0.0.1", port)
    message = str(e.value)
    assert f"127.0.0.1:{port}" in message and "in use" in message
    for way in ("--port", "REPLAY_SERVER_PORT", "make serve PORT="):
        assert way in message


def test_serve_on_a_busy_port_says_so(busy: socket.socket) -> None:
    port = busy.getsockname()[1]
    with busy:
        result = subprocess.run([*CLI, "serve", "examples/", "--port", str(port)],
                                capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 2
    assert f"127.0.0.1:{port}" in result.stderr and "--port" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_free_port_is_bound_and_shown_as_a_client_reaches_it() -> None:
    sock, url = listen.bind("0.0.0.0", 0)
    with sock:
        assert url == f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_loading_interrupts(sig: int) -> None:
    with listen.stop_signals(), pytest.raises(KeyboardInterrupt):
        signal.raise_signal(sig)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_once_loaded_asks_the_server_to_stop_and_is_never_lost(sig: int) -> None:
    # An exception raised from a signal handler can be dropped (Python ignores one raised
    # inside a collector's callback): a server then served on after its Ctrl-C. Once
    # loaded, a signal is a request that uvicorn's start still sees.
    sock, _ = listen.bind("127.0.0.1", 0)
    with sock, listen.stop_signals():
        listen.loaded()
        signal.raise_signal(sig)  # no KeyboardInterrupt
        assert listen.stop_requested()
        listen.run_uvicorn(object(), sock, Settings())  # returns at once: asked to stop
    with listen.stop_signals():
        assert not listen.stop_requested()  # each command starts afresh


@pytest.mark.slow
def test_the_access_log_never_prints_a_key_sent_in_the_query() -> None:
    """`--access-log` prints each request's path and query: a `key=` (Google's clients send
    their key so) or any key-like parameter is left out of it, the rest kept."""
    with spawn("serve", "examples/", "--access-log") as server:
        httpx.get(f"{server.url}/models?key=q-secret&api_key=a-secret&limit=2")
        server.stop()
    logged = [line for line in server.lines if "GET /v1/models" in line]
    assert logged and "limit=2" in logged[0], server.output
    assert "secret" not in server.output
