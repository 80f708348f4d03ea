"""Paths on the command line -> native records, through whichever reader claims each file.

Each command-line argument is one group: a directory is walked recursively (hidden files
skipped, symlinks followed once, loops cut) in sorted order, so that saved order is stable;
all file arguments together form one group. Readers see the files they claimed in a group
together, so that formats split over several files (a Batch input and its output) join.
Saved files are only ever opened for reading.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import LoadError
from .formats import READERS, LoadContext, Reader
from .records import Record

HEAD_LIMIT = 1 << 20


@dataclass
class Plan:
    """Which reader reads which files, group by group, before anything is read."""

    groups: list[list[tuple[Reader, list[Path]]]] = field(default_factory=list)
    ignored: list[Path] = field(default_factory=list)
    total_bytes: int = 0

    @property
    def files(self) -> list[tuple[str, Path]]:
        return [(r.name, p) for g in self.groups for r, ps in g for p in ps]


def _head(path: Path) -> bytes:
    """The first non-blank line of a file (at most HEAD_LIMIT bytes of it)."""
    try:
        with path.open("rb") as f:
            for _ in range(100):
                line = f.readline(HEAD_LIMIT)
                if line.strip() or not line:
                    return line
            return b""
    except OSError as e:
        raise LoadError(str(path), None, f"cannot read: {e.strerror or e}") from None


def _claim(path: Path) -> Reader | None:
    head = _head(path)
    return next((r for r in READERS if r.detect(path, head)), None)


def _walk(root: Path) -> Iterator[Path]:
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=_raise_walk):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if not name.startswith(".") and path.is_file():
                yield path


def _raise_walk(error: OSError) -> None:
    raise LoadError(str(error.filename), None, f"cannot read: {error.strerror or error}")


def _group(paths: Sequence[Path], plan: Plan, explicit: bool) -> list[tuple[Reader, list[Path]]]:
    by_reader: dict[str, tuple[Reader, list[Path]]] = {}
    for path in paths:
        reader = _claim(path)
        if reader is None:
            if explicit:
                raise LoadError(str(path), None, "not a saved-run format replay-server reads "
                                "(see `replay-server serve --help` for the formats)")
            plan.ignored.append(path)
            continue
        by_reader.setdefault(reader.name, (reader, []))[1].append(path)
        plan.total_bytes += path.stat().st_size
    return list(by_reader.values())


def plan(paths: Sequence[str | Path]) -> Plan:
    """Find and claim every file, raising LoadError for a path that holds nothing to serve."""
    result = Plan()
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise LoadError(str(path), None, "no such file or directory")
        if path.is_dir():
            group = _group(list(_walk(path)), result, explicit=False)
            if not group:
                raise LoadError(str(path), None, "no saved generations found in this directory")
            result.groups.append(group)
        else:
            files.append(path)
    if files:
        result.groups.append(_group(files, result, explicit=True))
    return result


def read(planned: Plan, ctx: LoadContext) -> Iterator[Record]:
    """Every record of every group, in saved order."""
    for group in planned.groups:
        for reader, files in group:
            yield from reader.read(files, ctx)
