"""Saved runs in object storage: the fsspec URLs among a command's paths (`s3://bucket/key`,
`s3://bucket/prefix/`, `gs://`, `hf://`, `https://`), fetched whole into a local cache, so
that every reader reads local files as it always does and every command takes URLs at once.

An object is kept once per identity (`identity`: its ETag or version id and its size, else
its size and modification time), as a blob named by a digest of its URL and identity: a
second start fetches nothing, a changed object is a new blob, fetched again. A blob is
written under a temporary name and renamed once whole and of the listed size, so a cut
download is never used, and concurrent starts (replicas, workers) at worst fetch an object
twice. Each URL argument becomes a view: a folder of hard links laid out as the keys are
under it (readers find a run's side files beside it, as the harness wrote them), made
under a temporary name and renamed, never changed once made.

Credentials come from each filesystem's own chain (for s3://: the AWS variables, a
profile, `AWS_ENDPOINT_URL` for another endpoint); a URL is only ever shown without them
(`wire.credentials.shown`), in messages, names and the index's record. The cached copies
are named by their URLs (`errors.show_as`): a bad line is `s3://bucket/run.jsonl:17`.
This is the only module that imports fsspec, and only when a URL is given.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LoadError, show_as
from ..wire.credentials import scrubbed, shown

EXTRA = "pip install 'replay-server[objects]'"
# What a filesystem of fsspec's needs, by the URL's scheme (the others: fsspec's own message)
INSTALL = {"s3": EXTRA, "s3a": EXTRA, "gs": "pip install gcsfs", "gcs": "pip install gcsfs",
           "hf": "pip install huggingface_hub"}
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# What a local write fails with, never a store's read: the cache's disk is full
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
THREADS = 8  # objects fetched at once: enough to fill a link, few enough for any store
# An object's identity, by the first field its filesystem gives (s3fs, gcsfs, huggingface_hub,
# fsspec's http): what changes when the object does. The last group only says when.
_VERSIONS = ("ETag", "etag", "VersionId", "generation", "blob_id", "Content-MD5", "Digest")
_TIMES = ("LastModified", "last_modified", "updated", "mtime", "Last-Modified")


def is_url(argument: str | Path) -> bool:
    """Whether a command-line path is a URL for fsspec (a Path never is: it lost `//`)."""
    return isinstance(argument, str) and _URL.match(argument) is not None


def cache_dir() -> Path:
    """`$REPLAY_SERVER_CACHE`, else `$XDG_CACHE_HOME/replay-server/objects` (by default
    `~/.cache/replay-server/objects`): a plain folder, removed to clear it."""
    own = os.environ.get("REPLAY_SERVER_CACHE")
    if own:
        return Path(own).expanduser().absolute()
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser().absolute()
    return base / "replay-server" / "objects"


@dataclass(frozen=True)
class Object:
    """One object as listed: its URL (shown: no credentials), size and identity (None:
    its store tells nothing that changes with it, so it is fetched every time)."""

    url: str
    size: int | None
    identity: str | None

    def record(self) -> dict[str, Any]:
        return {"url": self.url, "size": self.size, "identity": self.identity}


@dataclass
class Listing:
    """A URL argument's objects: (key under it, path for its filesystem, the object)."""

    url: str
    fs: Any
    prefix: bool
    objects: list[tuple[str, str, Object]] = field(default_factory=list)


@dataclass
class Fetched:
    """The arguments with each URL's local view in its place, and what was fetched."""

    paths: list[str | Path]
    objects: dict[Path, Object] = field(default_factory=dict)  # each local copy's object
    urls: dict[Path, str] = field(default_factory=dict)  # each view argument's URL, shown
    listings: dict[str, list[Object]] = field(default_factory=dict)  # by URL argument
    notes: list[str] = field(default_factory=list)


def filesystem(url: str) -> tuple[Any, str]:
    """fsspec's filesystem for `url` and the path in it; a LoadError says what to install."""
    scheme = url.partition("://")[0].lower()
    install = INSTALL.get(scheme, EXTRA)
    try:
        import fsspec
    except ImportError:
        raise LoadError(shown(url), None, f"reading object storage needs fsspec: {install}"
                        ) from None
    try:
        return fsspec.core.url_to_fs(url)  # type: ignore[no-any-return]
    except ImportError as e:
        raise LoadError(shown(url), None, f"needs the package of its filesystem ({e}): "
                        f"{install}") from None
    except ValueError as e:
        raise LoadError(shown(url), None, f"not a URL fsspec reads: {e}") from None


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
        why = f"cannot read it: {type(error).__name__}: {scrubbed(str(error))}"
    return LoadError(shown(url), None, why)


def identity(info: dict[str, Any]) -> str | None:
    """What changes when the object does, by its listing: an ETag or version id, else its
    modification time (with the size beside it, in `Object`), else None."""
    for name in (*_VERSIONS, *_TIMES):
        value = info.get(name)
        if value:
            return f"{name}={value}"
    return None


def listing(url: str) -> Listing:
    """The objects under `url` (a prefix lists like a folder: recursive, sorted, hidden
    names skipped), or the one object it names; nothing is fetched. A URL ending in `/`
    is a prefix whatever else its store holds: `s3://b/run/` never reads an object `run`."""
    fs, root = filesystem(url)
    root = root.rstrip("/")
    fs.invalidate_cache()  # asked of the store each time, never of an earlier listing
    try:
        prefix = url.endswith("/") or fs.info(root).get("type") == "directory"
        found = {p: m for p, m in fs.find(root, detail=True).items() if p.startswith(f"{root}/")
                 } if prefix else {root: fs.info(root)}
        if not found:
            raise FileNotFoundError(url)
    except Exception as e:  # each store raises its own; all are the URL's failure
        raise failure(url, e) from None
    listed = Listing(url, fs, prefix)
    base = url.rstrip("/")
    for path, meta in sorted(found.items()):
        key = path[len(root) + 1:] if prefix else path.partition("?")[0].rpartition("/")[2]
        hidden = prefix and any(p.startswith(".") for p in key.split("/"))
        if meta.get("type") == "directory" or hidden:
            continue
        whole = f"{base}/{key}" if prefix else url
        if "" in key.split("/") or ".." in key.split("/"):
            raise LoadError(shown(whole), None, "a key that cannot be a local file name")
        size = meta.get("size")
        listed.objects.append((key, path, Object(shown(whole), size, identity(meta))))
    return listed


def fetch(arguments: Sequence[str | Path], bar: Callable[[int, str], Any]) -> Fetched:
    """Each URL among `arguments` fetched into the cache (in parallel, with progress on
    `bar(total, what)`), in its place the local view; other arguments as they are."""
    if not any(is_url(a) for a in arguments):
        return Fetched(list(arguments))
    cache = cache_dir()
    listings = {a: listing(a) for a in dict.fromkeys(str(a) for a in arguments if is_url(a))}
    blobs = {obj: _blob(cache, obj) for listed in listings.values()
             for _, _, obj in listed.objects}
    wanted = {blobs[obj]: (listed, path, obj) for listed in listings.values()
              for _, path, obj in listed.objects}
    missing = {blob: job for blob, job in wanted.items() if not _cached(blob, job[2])}
    _fetch_all(missing, bar(sum(job[2].size or 0 for job in missing.values()),
                            f"fetching into {cache}"))
    fetched = Fetched([])
    for argument in arguments:
        if not is_url(argument):
            fetched.paths.append(argument)
            continue
        listed = listings[str(argument)]
        local = _view(cache, listed, blobs)
        fetched.paths.append(local)
        fetched.urls[local] = shown(listed.url)
        fetched.listings[shown(listed.url)] = [obj for _, _, obj in listed.objects]
        fetched.objects.update((local / key if listed.prefix else local, obj)
                               for key, _, obj in listed.objects)
        show_as(str(local), shown(listed.url).rstrip("/") if listed.prefix else
                shown(listed.url))
    fetched.notes.append(f"objects: {len(wanted)} from object storage, {len(missing)} "
                         f"fetched, {len(wanted) - len(missing)} from the cache ({cache})")
    return fetched


def _blob(cache: Path, obj: Object) -> Path:
    """Where the object is kept: one name per URL and identity (a fresh one per fetch
    when the store gives no identity: nothing says whether an old copy is current)."""
    stamp = obj.identity if obj.identity is not None else uuid.uuid4().hex
    digest = hashlib.sha256(f"{obj.url}\0{stamp}\0{obj.size}".encode()).hexdigest()
    return cache / "blobs" / digest[:2] / digest


def _cached(blob: Path, obj: Object) -> bool:
    try:
        return obj.identity is not None and blob.stat().st_size == obj.size
    except OSError:
        return False


def _fetch_all(jobs: dict[Path, tuple[Listing, str, Object]], bar: Any) -> None:
    """Every job fetched, THREADS at a time; the first failure (in listing order) raised.
    On a failure or Ctrl-C nothing more begins and what is under way stops at its next
    chunk: a pool's own exit would first fetch every object still queued."""
    stop = threading.Event()
    pool = ThreadPoolExecutor(THREADS)
    try:
        futures = [pool.submit(_fetch_one, listed.fs, path, obj, blob, _progress(bar, stop))
                   for blob, (listed, path, obj) in jobs.items()]
        for future in futures:
            future.result()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()


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


def _view(cache: Path, listed: Listing, blobs: dict[Object, Path]) -> Path:
    """The argument's local view: its objects' blobs, linked under their keys in a folder
    that is made whole and never changed; for one object, the file in it."""
    keys = [(key, blobs[obj]) for key, _, obj in listed.objects]
    digest = hashlib.sha256(repr((shown(listed.url), keys)).encode()).hexdigest()
    view = cache / "views" / digest[:32]
    if not view.is_dir():
        part = view.with_name(f".{view.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        try:
            _lay_out(part, keys)
        except OSError as e:  # keys `a` and `a/b`: no folder holds both
            shutil.rmtree(part, ignore_errors=True)
            raise LoadError(shown(listed.url), None, "its objects cannot be laid out as files "
                            f"in the cache ({cache}): {e.strerror or e}") from None
        try:
            part.rename(view)
        except OSError:
            if not view.is_dir():
                raise
            shutil.rmtree(part)  # another process made the same view first
    return view if listed.prefix else view / keys[0][0]


def _lay_out(folder: Path, keys: list[tuple[str, Path]]) -> None:
    folder.mkdir(parents=True)
    for key, blob in keys:
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(blob, folder / key)
        except OSError:  # a file system without hard links
            shutil.copyfile(blob, folder / key)
