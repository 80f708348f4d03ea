"""The index cache's folder (`index/cache.py` keys, builds and opens its entries): what it
holds, the entries in use, and removing the others.

A process that serves an entry holds a shared lock on it (`hold`) for as long as it
keeps the index open (`keep`); an entry is removed (`remove_unused`: by `replay-server
cache --clear`, or when a newer entry of the same inputs supersedes it) only under an
exclusive lock, so never while served. Removing one in use freed nothing (its open copy
stays until the server exits) and broke what opens it by name after: the workers of
`serve --workers N`, which open it while they start, after the ready line.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import weakref
from dataclasses import dataclass
from pathlib import Path

from ..errors import LoadError
from ..saved.objects import cache_root
from ..saved.writer import being_written
from . import file


def indexes_dir() -> Path:
    """Where the index files are kept: `indexes/` in replay-server's cache."""
    return cache_root() / "indexes"


def hold(entry: Path) -> int | None:
    """Lock `entry` (shared) until `keep`'s index is freed or `release`; None if it is
    not there, or was removed or replaced by the time the lock was taken (then it is not the
    file the caller meant)."""
    try:
        fd = os.open(entry, os.O_RDONLY)
    except OSError:
        return None
    with contextlib.suppress(OSError):  # (a filesystem without locks: served unlocked)
        fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        same = os.stat(entry).st_ino == os.fstat(fd).st_ino
    except OSError:
        same = False
    if not same:
        os.close(fd)
        return None
    return fd


def keep(lock: int, index: file.StoredIndex) -> file.StoredIndex:
    """`index`, opened from the entry `lock` holds: the lock goes with it (a server's
    index lives as long as the server)."""
    weakref.finalize(index, os.close, lock)
    return index


def release(lock: int) -> None:
    """Let go of a lock `hold` took (an entry that is not served after all)."""
    os.close(lock)


def remove_unused(path: Path) -> bool:
    """Remove the entry `path` unless a process holds it (`hold`); whether it was."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False  # removed meanwhile
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False  # served
    except OSError:
        pass  # a filesystem without locks: whether it is served cannot be told
    try:
        path.unlink()
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Entry:
    """A cached index as `replay-server cache` lists it."""

    path: Path
    size: int
    used: float  # when it was last served (its mtime)
    built: float | None  # None: its meta cannot be read
    inputs: list[str]


def entries() -> list[Entry]:
    """Every index in the cache, the most recently used first."""
    found = []
    for path in indexes_dir().glob("*.idx"):
        try:
            st = path.stat()
        except OSError:
            continue  # removed meanwhile
        try:
            index = file.StoredIndex(path)
            built, inputs = float(index.meta["built"]), index.sources.arguments
            index.db.close()
        except (LoadError, OSError, KeyError, ValueError):
            built, inputs = None, []
        found.append(Entry(path, st.st_size, st.st_mtime, built, inputs))
    return sorted(found, key=lambda e: -e.used)


def unfinished() -> list[tuple[Path, int]]:
    """What builds cut short left (a start killed while it wrote an index: its file under
    `writer.written_whole`'s temporary name, which no process writes now), with their
    sizes: never opened, but they take room until `clear`."""
    found = []
    for path in indexes_dir().glob(".*.tmp"):
        try:
            if not being_written(path):
                found.append((path, path.stat().st_size))
        except OSError:
            continue  # renamed meanwhile: a build that finished
    return found


def summary() -> str:
    """The cache in a phrase: how many indexes, how big, where."""
    sizes = [e.size for e in entries()]
    return f"{len(sizes)} index(es), {sum(sizes) / 1e6:.1f} MB in {indexes_dir()}"


@dataclass(frozen=True)
class Cleared:
    """What `clear` removed, and kept."""

    indexes: int
    unfinished: int
    freed: int  # bytes
    in_use: int  # indexes kept: a running server serves them


def clear() -> Cleared:
    """Remove every index of the cache that no process serves, and what builds cut short
    left (not what a start is writing now)."""
    count = in_use = freed = 0
    for entry in entries():
        if remove_unused(entry.path):
            count, freed = count + 1, freed + entry.size
        else:
            in_use += entry.path.exists()
    left = unfinished()
    for path, _ in left:
        path.unlink(missing_ok=True)
    return Cleared(count, len(left), freed + sum(size for _, size in left), in_use)
