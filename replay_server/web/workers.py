"""`serve --workers N`: several processes answering from one shared index file.

Every run is served from an index file (one given, or the one saved files are served
through, index/cache.py): each worker opens it read-only through a shared memory map, so
N workers hold one copy of the run, not N.
The one piece of state a replay keeps, the per-prompt cursor that hands out different
saved samples to successive n=1 calls, would be split between workers; so a run that
needs it (prompts with several different saved samples, or --allow-ambiguous) is refused
with several workers rather than served in a wrong order, unless the state is shared
(`--state`: each worker is then a replica of its own, replay/state/redis.py). Without
it, counters and recent misses (`/replay/status`, `/replay/misses`) describe the worker
that answers; every worker logs its misses.

Each worker is a process of its own (spawned: nothing of the parent's state but the
socket) that runs uvicorn's public `Server.run` on the socket the parent bound, as
`serve` does with one. The parent only watches them: SIGINT or SIGTERM stops them all
(each drains its requests in flight), and a worker that dies stops the rest and the
command fails, loudly, rather than serving on with fewer. A worker whose parent is gone
(killed by SIGKILL, which leaves it no way to stop them) stops too.
"""

from __future__ import annotations

import gc
import multiprocessing
import socket
import threading
from collections.abc import Sequence
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import uvicorn

from ..errors import LoadError
from ..index.file import StoredIndex
from ..index.samples import Rules
from ..replay.state import shared
from ..saved.loader import tokenizer_of
from ..settings import Settings
from ..wire.credentials import shown
from .app import create_app
from .listen import stop_requested, uvicorn_config

GRACE_S = 40.0  # a worker drains for up to 30 s (uvicorn_config) before it is killed


def check(index: StoredIndex, settings: Settings) -> None:
    """Raise LoadError unless this run can be served by several workers (with --state:
    unless the store can be reached and holds this run, or none, under the prefix)."""
    if settings.state is None and (index.needs_cursor() or settings.allow_ambiguous):
        raise LoadError(str(index.path), None, f"{index.needs_cursor()} prompt(s) saved "
                        "several different samples, which n=1 calls get one by one in saved "
                        "order (or --allow-ambiguous asks for that): that order lives in one "
                        "process, so serve this run with --workers 1, or share it between "
                        "workers with --state redis://...")
    if settings.state is not None:  # (each worker will be a replica of its own)
        shared(index, settings.state, shown(settings.state), settings.state_prefix,
               Rules(settings.strict, settings.allow_ambiguous)).close()


def run(paths: Sequence[str | Path], settings: Settings, sock: socket.socket) -> None:
    """Serve with `settings.workers` processes on a socket bound by the caller, until
    SIGINT or SIGTERM (`listen.stop_requested`) or until a worker dies
    (ChildProcessError)."""
    spawn = multiprocessing.get_context("spawn")
    index = Path(paths[0]).resolve()
    processes = [spawn.Process(target=serve_one, args=(index, settings, sock),
                               name=f"replay-server worker {n + 1}")
                 for n in range(settings.workers)]
    try:
        for process in processes:
            process.start()
        ended: list[Any] = []
        while not ended:
            if stop_requested():
                return
            ended = wait([p.sentinel for p in processes], timeout=0.1)
        dead = next(p for p in processes if p.sentinel in ended)
        dead.join()  # its sentinel may be ready a moment before its exit status
        raise ChildProcessError(f"{dead.name} (pid {dead.pid}) exited with status "
                                f"{dead.exitcode}; the other workers were stopped")
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn drains, then exits
        for process in processes:
            if process.pid is not None:
                process.join(GRACE_S)
                if process.is_alive():
                    process.kill()
                    process.join()


def serve_one(index: Path, settings: Settings, sock: socket.socket) -> None:
    """One worker: the app over the shared index file, served on `sock` until SIGTERM."""
    app = create_app(settings, StoredIndex(index, settings.aliases()),
                     tokenizer=tokenizer_of(settings.tokenizer))
    gc.collect()
    gc.freeze()  # as `serve` does: the index's objects out of the collector's sight
    config = uvicorn_config(app, settings.log_level, settings.access_log,
                            settings.read_timeout)
    server = uvicorn.Server(config)
    threading.Thread(target=_stop_with_parent, args=(server,), daemon=True).start()
    server.run(sockets=[sock])


def _stop_with_parent(server: uvicorn.Server) -> None:
    """Stop this worker (draining, as SIGTERM does) once the parent is gone: a parent
    killed by SIGKILL has no way to stop its workers, which would go on serving."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        wait([parent.sentinel])
        server.should_exit = True
