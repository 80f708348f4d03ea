"""`serve --workers N`: several processes answering from one shared index file.

Only an index file (`replay-server index`) can be served by several workers: each opens
it read-only through a shared memory map, so N workers hold one copy of the run, not N.
The one piece of state a replay keeps, the per-prompt cursor that hands out different
saved samples to successive n=1 calls, would be split between workers; so a run that
needs it (prompts with several different saved samples, or --allow-ambiguous) is refused
with several workers rather than served in a wrong order. Counters and recent misses
(`/replay/status`, `/replay/misses`) describe the worker that answers; every worker logs
its misses.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from ..errors import LoadError
from ..index.file import StoredIndex
from ..index.index import Index
from ..settings import Settings
from .app import create_app
from .listen import SlowClientProtocol, uvicorn_config

ENV = "REPLAY_SERVER_WORKER_SPEC"


def check(index: Index, settings: Settings) -> None:
    """Raise LoadError unless this run can be served by several workers."""
    if not isinstance(index, StoredIndex):
        raise LoadError("--workers", None, "several workers need an index file: build one "
                        "with `replay-server index PATHS -o RUN.idx`, then serve RUN.idx")
    if index.needs_cursor() or settings.allow_ambiguous:
        raise LoadError(str(index.path), None, f"{index.needs_cursor()} prompt(s) saved "
                        "several different samples, which n=1 calls get one by one in saved "
                        "order (or --allow-ambiguous asks for that): that order lives in one "
                        "process, so serve this run with --workers 1")


def run(paths: Sequence[str | Path], settings: Settings, sock: socket.socket) -> None:
    """Serve with `settings.workers` processes on a socket bound by the caller."""
    os.environ[ENV] = orjson.dumps({"path": str(Path(paths[0]).resolve()),
                                    "settings": dataclasses.asdict(settings)}).decode()
    config = uvicorn_config("replay_server.web.workers:create", settings.log_level,
                            settings.access_log, settings.read_timeout, factory=True,
                            workers=settings.workers)
    Multiprocess(config, sockets=[sock]).run()


def create() -> FastAPI:
    """The app of one worker process (uvicorn calls this in each)."""
    spec: dict[str, Any] = orjson.loads(os.environ[ENV])
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                              for k, v in spec["settings"].items()}
    settings = Settings(**values)
    SlowClientProtocol.read_timeout = settings.read_timeout
    return create_app(settings, StoredIndex(Path(spec["path"]), settings.aliases()))
