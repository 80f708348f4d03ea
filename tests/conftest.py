"""Every test process, and every process a test starts, uses a cache of its own: never the
user's (`$REPLAY_SERVER_CACHE`, replay-server's fetched objects and the index files saved
files are served through, `index/cache.py`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _own_cache() -> Iterator[None]:
    """A temporary cache for the whole session, in the environment that the processes
    tests start inherit; removed at the end. (Set in `os.environ`, not by monkeypatch: a
    test that sets its own for a while still finds this one after.)"""
    before = os.environ.get("REPLAY_SERVER_CACHE")
    folder = tempfile.mkdtemp(prefix="replay-server-test-cache-")
    os.environ["REPLAY_SERVER_CACHE"] = folder
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("REPLAY_SERVER_CACHE", None)
        else:
            os.environ["REPLAY_SERVER_CACHE"] = before
        shutil.rmtree(folder, ignore_errors=True)
