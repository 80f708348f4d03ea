"""One object fetched into the cache whole and as listed (`saved/fetching.py`), through a
real S3-compatible server (moto's, a process of its own): an object overwritten between
its listing and its fetch is never kept, Ctrl-C begins no more fetches, and a cache that
cannot hold an object is told from a store that cannot give it."""

from __future__ import annotations

import resource
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replay_server.errors import LoadError
from replay_server.saved import fetching, objects
from tests.parts.s3 import S3, Quiet, reading, s3_server
from tests.saved.test_objects import RUN, environ
from tests.support import CLI


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.mark.parametrize(("info", "expected"), [
    ({"ETag": '"abc"', "LastModified": "t"}, 'ETag="abc"'),
    ({"generation": "17", "updated": "t"}, "generation=17"),
    ({"Last-Modified": "Sun, 06 Dec 2026"}, "Last-Modified=Sun, 06 Dec 2026"),
    ({"size": 3}, None),
])
def test_an_object_s_identity_is_its_etag_or_version_else_its_time(
        info: dict[str, Any], expected: str | None) -> None:
    assert fetching.identity(info) == expected


@pytest.mark.slow
def test_an_object_overwritten_between_its_listing_and_its_fetch_is_never_kept(
        s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reading(s3, tmp_path, monkeypatch)
    s3.bucket("race", {"run.jsonl": RUN})

    def overwrite(total: int, what: str) -> Quiet:  # called once listed, before fetching
        s3.bucket("race", {"run.jsonl": RUN.replace(b"blue", b"gold")})  # the same size
        return Quiet()

    with pytest.raises(LoadError, match=r"^s3://race/run.jsonl: changed while it was fetched"):
        objects.fetch(["s3://race/run.jsonl"], overwrite)
    assert not [p for p in (tmp_path / "c").rglob("*") if p.is_file()]  # nothing kept
    again = objects.fetch(["s3://race/run.jsonl"], lambda total, what: Quiet())
    assert b"gold" in Path(again.paths[0]).read_bytes()


@pytest.mark.slow
def test_ctrl_c_during_a_fetch_begins_no_more_and_leaves_the_cache_whole(
        s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reading(s3, tmp_path, monkeypatch)
    body = RUN * 1000  # several chunks each
    s3.bucket("stop", {f"p/run{i:02}.jsonl": body for i in range(40)})

    class CtrlC(Quiet):
        once = threading.Lock()  # updates come from every fetching thread

        def update(self, n: int) -> None:  # the first bytes arrived: Ctrl-C, once
            if self.once.acquire(blocking=False):
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        objects.fetch(["s3://stop/p/"], lambda total, what: CtrlC())
    assert s3.gets("stop") < 40  # it stopped: not every object was fetched first
    assert not list((tmp_path / "c").rglob("*.part"))
    again = objects.fetch(["s3://stop/p/"], lambda total, what: Quiet())
    assert len(again.objects) == 40
    assert all(copy.read_bytes() == body for copy in again.objects)


def small_files() -> None:
    """No file of this process may grow past 64 KiB: a disk too small for the object."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))


@pytest.mark.slow
def test_a_cache_that_cannot_hold_an_object_is_told_from_a_store_that_cannot_give_it(
        s3: S3, tmp_path: Path) -> None:
    s3.bucket("big", {"run.jsonl": RUN * 1000})
    done = subprocess.run([*CLI, "inspect", "s3://big/run.jsonl"], env=environ(s3, tmp_path),
                          capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: s3://big/run.jsonl: cannot be written into the "
                                  f"cache ({tmp_path / 'c' / 'objects'}): File too large"), \
        done.stderr
    assert not list((tmp_path / "c").rglob("*.part"))
