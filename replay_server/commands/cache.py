"""`replay-server cache`: where replay-server keeps the index files that saved files are
served through (`index/cache.py`) and the objects it fetched, what it holds, and clearing
the indexes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..index.cache_folder import clear, entries, indexes_dir, unfinished
from ..saved.objects import cache_dir, cache_root
from .exits import DONE


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (unreadable)"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def _size(size: float) -> str:
    return f"{size / 1e6:.1f} MB"


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) \
        if folder.is_dir() else 0


def show(say: Callable[[str], None]) -> int:
    """Say the cache's place, each index (what it was built from, size, built, last
    used, the most recent first) and the totals."""
    found = entries()
    say(f"replay-server's cache: {cache_root()}")
    say(f"indexes ({indexes_dir()}): {len(found)}, {_size(sum(e.size for e in found))}")
    for entry in found:
        say(f"  {entry.path.name}: {_size(entry.size)}, built {_when(entry.built)}, "
            f"last used {_when(entry.used)}")
        say(f"    from {' '.join(entry.inputs) or 'unknown (unreadable: rebuilt at its next use)'}")
    if left := unfinished():
        say(f"unfinished builds ({indexes_dir()}): {len(left)}, "
            f"{_size(sum(size for _, size in left))} (left by a start stopped while it wrote "
            "an index; --clear removes them)")
    say(f"fetched objects ({cache_dir()}): {_size(_folder_size(cache_dir()))}")
    return DONE


def clear_indexes(say: Callable[[str], None]) -> int:
    """Remove every index of the cache that no server serves, and say what that freed
    (fetched objects are kept: fetching them again costs more than an index)."""
    cleared = clear()
    also = f" and {cleared.unfinished} unfinished build(s)" if cleared.unfinished else ""
    kept = f"; kept {cleared.in_use} in use by a running server" if cleared.in_use else ""
    say(f"removed {cleared.indexes} index(es){also} from {indexes_dir()}, freed "
        f"{_size(cleared.freed)}{kept}")
    say(f"fetched objects kept ({cache_dir()}, {_size(_folder_size(cache_dir()))}): remove "
        "that folder to clear them too")
    return DONE
