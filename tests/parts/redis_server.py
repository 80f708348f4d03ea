"""A real `redis-server` (Debian's package) for the shared-state tests: on a free
127.0.0.1 port, in a temporary directory, with nothing saved to disk, stopped by its PID
whatever happened. Skipped where redis-server is missing and cannot be installed (never
in CI: `parts.system.need` fails there)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.parts.system import need
from tests.support import free_port


@dataclass
class RedisServer:
    proc: subprocess.Popen[bytes]
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Stop it now (SIGKILL, by its PID): the store goes away as a crash takes it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def restart(self) -> None:
        """Kill it, and start an empty one on the same port (nothing was saved)."""
        self.stop()
        self.proc = _start(self.port, self.directory)


def _start(port: int, directory: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait(10)
                raise RuntimeError(f"redis-server did not start on port {port}") from None
            time.sleep(0.02)


@contextmanager
def running(directory: Path) -> Iterator[RedisServer]:
    need(**{"redis-server": "redis-server"})
    port = free_port()
    server = RedisServer(_start(port, directory), port, directory)
    try:
        yield server
    finally:
        server.stop()
