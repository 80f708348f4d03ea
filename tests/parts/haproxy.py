"""A real HAProxy (Debian's) in front of replay-server replicas, balancing as compose does.

One source of truth for the balancing settings: the balancer runs docker/haproxy.cfg, the
file compose's `scale` profile mounts, with only where it listens and whom it balances
over changed for this machine. Its `bind :8000` becomes a socket the test bound on a free
127.0.0.1 port and hands over (`fd@N`: no race for the port), its `server-template` (the
replicas Docker's DNS finds) becomes one `server` line per local port, named as the
template names them; a runtime API socket is added (`admin`), and every other line
(timeouts, round robin, health checks on /health, retry-on, redispatch) is the file's own.

`replicas` starts N `replay-server` processes behind it; `Fleet.kill` takes one out by
its PID (its whole process group: workers too), as a crashed replica goes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.parts import system
from tests.support import ROOT, Spawned, spawn, wait_for

CONFIG = ROOT / "docker" / "haproxy.cfg"
BACKEND = "replicas"  # the file's backend section
STOP_S = 10


def local_config(source: str, listen_fd: int, ports: Sequence[int], admin: Path) -> str:
    """`source` (docker/haproxy.cfg's text) for this machine: listening on the inherited
    socket `listen_fd`, balancing over `ports` on 127.0.0.1, its runtime API on `admin`."""
    lines = source.splitlines()
    binds = [i for i, line in enumerate(lines) if line.split()[:1] == ["bind"]]
    templates = [i for i, line in enumerate(lines) if line.split()[:1] == ["server-template"]]
    assert len(binds) == 1 and len(templates) == 1, (
        f"{CONFIG}: expected one `bind` and one `server-template` line")
    [at], [template] = binds, templates
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at] = f"{indent}bind fd@{listen_fd}"
    prefix = lines[template].split()[1]
    lines[template:template + 1] = [f"{indent}server {prefix}{n} 127.0.0.1:{port}"
                                    for n, port in enumerate(ports, 1)]
    lines.insert(lines.index("global") + 1, f"{indent}stats socket {admin} level admin")
    return "\n".join(lines) + "\n"


@dataclass
class Balancer:
    """A running haproxy: its /v1 base URL, its log (one `option httplog` line a request)
    and its runtime API."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    socket_path: Path
    servers: list[str]  # the `server` names, in the order of the ports given

    def admin(self, command: str) -> str:
        """One command of haproxy's runtime API (management.txt, section 9.3); its answer."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(self.socket_path))
            sock.sendall(command.encode() + b"\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        return answer.decode()

    def checks_off(self, replica: int) -> None:
        """Stop health-checking `replica`: haproxy then keeps sending it its turn, whatever
        happens to it, so that only retry-on and redispatch can save its requests."""
        answer = self.admin(f"disable health {BACKEND}/{self.servers[replica]}")
        assert answer.strip() == "", answer

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()


def haproxy_binary() -> str:
    system.need(haproxy="haproxy")
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/bin")
    assert found, "haproxy: installed, but not found"
    return found


@contextmanager
def balancer(ports: Sequence[int], tmp: Path) -> Iterator[Balancer]:
    """Debian's haproxy on a free 127.0.0.1 port in front of `ports`, in `tmp`, from
    docker/haproxy.cfg; stopped by its PID whatever happened."""
    admin, config, log = tmp / "admin.sock", tmp / "haproxy.cfg", tmp / "haproxy.log"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        config.write_text(local_config(CONFIG.read_text(), listener.fileno(), ports, admin))
        proc = _start(config, log, listener.fileno())
    try:
        servers = [line.split()[1] for line in config.read_text().splitlines()
                   if line.split()[:1] == ["server"]]
        running = Balancer(proc, f"http://127.0.0.1:{port}/v1", log, admin, servers)
        wait_for(lambda: proc.poll() is not None or (admin.exists() and _answers(running)),
                 timeout=30)
        assert proc.poll() is None, f"haproxy exited {proc.returncode}:\n{log.read_text()}"
        yield running
    finally:
        _stop(proc)


def _start(config: Path, log: Path, listen_fd: int) -> subprocess.Popen[bytes]:
    """`haproxy -c` on `config` (its errors, named), then haproxy in the foreground, in a
    session of its own, logging to `log`, handed the listening socket."""
    binary = haproxy_binary()
    check = subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True,
                           timeout=30, pass_fds=[listen_fd])
    assert check.returncode == 0, f"{config}:\n{check.stdout}{check.stderr}"
    with log.open("wb") as out:
        return subprocess.Popen([binary, "-db", "-f", str(config)], cwd=config.parent,
                                stdout=out, stderr=subprocess.STDOUT, pass_fds=[listen_fd],
                                start_new_session=True)


def _answers(running: Balancer) -> bool:
    try:
        return "Name: HAProxy" in running.admin("show info")
    except OSError:
        return False  # not listening yet


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (haproxy -db stops at once), then SIGKILL to its group if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@dataclass
class Fleet:
    """N replicas behind a balancer."""

    replicas: list[Spawned]
    balancer: Balancer

    @property
    def url(self) -> str:
        """The balancer's /v1 base URL: what a harness is pointed at."""
        return self.balancer.url

    def kill(self, replica: int) -> None:
        """SIGKILL `replica`'s process group (its workers too) by its PID, and reap it."""
        proc = self.replicas[replica].proc
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        self.replicas[replica].wait()


@contextmanager
def replicas(argv: Sequence[str], count: int, tmp: Path,
             env: dict[str, str] | None = None) -> Iterator[Fleet]:
    """`replay-server ARGV` (e.g. `serve RUN --state URL`) `count` times, each on a free
    127.0.0.1 port, behind a real haproxy; every process stopped by its PID at the end."""
    with ExitStack() as stack:
        started = [stack.enter_context(spawn(*argv, env=env)) for _ in range(count)]
        ports = [int(replica.base.rsplit(":", 1)[1]) for replica in started]
        yield Fleet(started, stack.enter_context(balancer(ports, tmp)))
