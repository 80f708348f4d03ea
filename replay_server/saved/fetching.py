"""One object fetched into the cache whole and as it was listed (`saved/objects.py` lists
them, names their places and lays them out): THREADS at a time, each written under a
temporary name and renamed only once it has its listed size and the store still gives
it its listed identity. A store's read hands out its newest body, whatever was listed:
without that second look, an object overwritten between its listing and its fetch would
be kept (and served from the cache at every later start) under the identity listed.
"""

from __future__ import annotations

import errno
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LoadError
from ..wire.credentials import scrubbed, shown

# What a local write fails with, never a store's read: the cache's disk is full
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
THREADS = 8  # objects fetched at once: enough to fill a link, few enough for any store
# An object's identity, by the first field its filesystem gives (s3fs, gcsfs, huggingface_hub,
# fsspec's http): what changes when the object does. The last group only says when.
_VERSIONS = ("ETag", "etag", "VersionId", "generation", "blob_id", "Content-MD5", "Digest")
_TIMES = ("LastModified", "last_modified", "updated", "mtime", "Last-Modified")


@dataclass(frozen=True)
class Object:
    """One object as listed: its URL (shown: no credentials), size and identity (None:
    its store tells nothing that changes with it, so it is fetched every time)."""

    url: str
    size: int | None
    identity: str | None

    def record(self) -> dict[str, Any]:
        return {"url": self.url, "size": self.size, "identity": self.identity}


def failure(url: str, error: Exception) -> LoadError:
    """A fetch or listing that failed, as a LoadError naming the URL (never credentials)."""
    if isinstance(error, LoadError):
        return error
    if isinstance(error, FileNotFoundError):
        why = "no such object, prefix or bucket"
    elif isinstance(error, PermissionError):
        why = ("access denied: the credentials found (the filesystem's usual chain; for "
               "s3://, the AWS_* variables or a profile) may not read it")
    else:
        name = type(error).__name__
        why = f"cannot read it: {name}: {scrubbed(str(error))}{_HINTS.get(name, '')}"
    return LoadError(shown(url), None, why)


# What to do about the two failures of a first try against MinIO or moto, which botocore
# (s3fs's client) names in its own words only; by name, since botocore is optional.
_HINTS = {
    "NoCredentialsError": " (for s3://, set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                          "or AWS_PROFILE)",
    "EndpointConnectionError": " (for MinIO, moto or another S3-compatible server, check "
                               "AWS_ENDPOINT_URL: it names the server's URL)",
}


def identity(info: dict[str, Any]) -> str | None:
    """What changes when the object does, by its listing: an ETag or version id, else its
    modification time (with the size beside it, in `Object`), else None."""
    for name in (*_VERSIONS, *_TIMES):
        value = info.get(name)
        if value:
            return f"{name}={value}"
    return None


def fetch_all(jobs: dict[Path, tuple[Any, str, Object]], bar: Any) -> None:
    """Every job (blob: its filesystem, path there, object) fetched, THREADS at a time;
    the first failure (in listing order) raised. On a failure or Ctrl-C nothing more
    begins and what is under way stops at its next chunk (a pool's own exit would first
    fetch every object still queued); it returns once none is under way."""
    stop, under = threading.Event(), _UnderWay()
    pool = ThreadPoolExecutor(THREADS)
    try:
        futures = [pool.submit(under.run, _fetch_one, fs, path, obj, blob,
                               _progress(bar, stop)) for blob, (fs, path, obj) in jobs.items()]
        for future in futures:
            future.result()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        under.wait()
        bar.close()


class _UnderWay:
    """How many fetches are under way. The pool's own wait misses a thread that Ctrl-C
    caught as it was being started (it is never added to the pool's threads), whose
    fetch would go on writing after `fetch_all` returned: its end is waited for here."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def run(self, fetch: Callable[..., None], *job: Any) -> None:
        with self.changed:
            self.count += 1
        try:
            fetch(*job)  # which begins nothing once stopped: counted first, then asked
        finally:
            with self.changed:
                self.count -= 1
                self.changed.notify_all()

    def wait(self) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.count == 0)


class Stopped(Exception):
    """A fetch given up: another failed, or the user pressed Ctrl-C."""


def _progress(bar: Any, stop: threading.Event) -> Any:
    """fsspec's callback for one fetch: its bytes on `bar`, and Stopped once `stop` is set."""
    from fsspec.callbacks import Callback

    class Progress(Callback):  # type: ignore[misc]
        def relative_update(self, inc: int = 1) -> None:
            if stop.is_set():
                raise Stopped
            bar.update(inc)

    return Progress()


def _fetch_one(fs: Any, path: str, obj: Object, blob: Path, progress: Any) -> None:
    """The object, whole, at `blob`: written beside it and renamed once of its size."""
    progress.relative_update(0)  # Stopped: given up before it began
    part = blob.with_name(f".{blob.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part")
    try:
        try:
            blob.parent.mkdir(parents=True, exist_ok=True)
            part.touch()  # a cache that cannot be written, told from a store that refuses
        except OSError as e:
            raise _unwritable(obj, blob, e) from None
        try:
            fs.get_file(path, str(part), callback=progress)
        except Exception as e:  # each store raises its own; all are the URL's failure
            if isinstance(e, OSError) and e.errno in _FULL:
                raise _unwritable(obj, blob, e) from None
            raise failure(obj.url, e) from None
        got = part.stat().st_size
        if obj.size is not None and got != obj.size:
            raise LoadError(obj.url, None, f"the download was cut: {got} of its {obj.size} "
                            "bytes arrived (nothing of it is used; run the command again)")
        _unchanged(fs, path, obj)
        os.replace(part, blob)
    finally:
        part.unlink(missing_ok=True)


def _unwritable(obj: Object, blob: Path, error: OSError) -> LoadError:
    """The cache's failure, named as such: a full disk is not the store's fault."""
    return LoadError(obj.url, None, f"cannot be written into the cache ({blob.parents[2]}): "
                     f"{error.strerror or error} ({obj.size} bytes; free space there, or set "
                     "REPLAY_SERVER_CACHE to a folder that can hold it)")


def _unchanged(fs: Any, path: str, obj: Object) -> None:
    """A LoadError unless the object is still as listed once fetched. A store's read gives
    its newest body: an object overwritten between its listing and its fetch (or during a
    fetch in parts) would be kept under the identity listed, and served as that from the
    cache at every later start. (One changed and changed back within a fetch is not seen.)"""
    if obj.identity is None:
        return
    fs.invalidate_cache()
    try:
        now = identity(fs.info(path))
    except Exception as e:  # each store raises its own; all are the URL's failure
        raise failure(obj.url, e) from None
    if now != obj.identity:
        raise LoadError(obj.url, None, f"changed while it was fetched (listed with "
                        f"{obj.identity}, now {now}): nothing of it is kept; run the command "
                        "again")
