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
It and `saved/fetching.py` (one object fetched, whole and as listed) are the only
modules that import fsspec, and only when a URL is given.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LoadError, show_as
from ..wire.credentials import scrubbed, shown
from .fetching import Object, failure, fetch_all, identity

EXTRA = "pip install 'replay-server[objects]'"
# What a filesystem of fsspec's needs, by the URL's scheme (the others: fsspec's own message)
INSTALL = {"s3": EXTRA, "s3a": EXTRA, "gs": "pip install gcsfs", "gcs": "pip install gcsfs",
           "hf": "pip install huggingface_hub"}
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(argument: str | Path) -> bool:
    """Whether a command-line path is a URL for fsspec (a Path never is: it lost `//`)."""
    return isinstance(argument, str) and _URL.match(argument) is not None


def cache_root() -> Path:
    """replay-server's cache: `$REPLAY_SERVER_CACHE`, else `$XDG_CACHE_HOME/replay-server`
    (by default `~/.cache/replay-server`). It holds `objects/` (the fetched objects, here)
    and `indexes/` (the index files saved files are served through, `index/cache.py`):
    plain folders, each removed to clear it."""
    own = os.environ.get("REPLAY_SERVER_CACHE")
    if own:
        return Path(own).expanduser().absolute()
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser().absolute()
    return base / "replay-server"


def cache_dir() -> Path:
    """Where fetched objects are kept: `objects/` in the cache (`cache_root`)."""
    return cache_root() / "objects"


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
        raise LoadError(shown(url), None, f"not a URL fsspec reads: {scrubbed(str(e))}"
                        ) from None


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
    wanted = {blobs[obj]: (listed.fs, path, obj) for listed in listings.values()
              for _, path, obj in listed.objects}
    missing = {blob: job for blob, job in wanted.items() if not _cached(blob, job[2])}
    fetch_all(missing, bar(sum(job[2].size or 0 for job in missing.values()),
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
