"""Paths on the command line -> native records -> an index, with progress and a report.

Records come through whichever reader claims each file.

Each command-line argument is one group: a directory is walked recursively (hidden files
skipped, symlinks followed once, loops cut) in sorted order, so that saved order is stable;
all file arguments together form one group. Readers see the files they claimed in a group
together, so that formats split over several files (a Batch input and its output) join.
Saved files are only ever opened for reading. A URL among the paths (`s3://bucket/prefix/`)
is fetched into a local cache first (`saved/objects.py`), and then read as a directory or
file of it; every message names the URL.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from tqdm import tqdm

from ..errors import LoadError
from ..settings import DEFAULT_MAX_LINE
from .fetching import Object
from .formats import READERS, LoadContext, Reader
from .jsonl import LineTooLong, line_not_json
from .objects import fetch
from .record import Record
from .writer import not_a_file

if TYPE_CHECKING:
    from .local_tokenizer import LocalTokenizer

SHOWN = 20  # the files named when a directory holds nothing any reader claims


@dataclass
class Plan:
    """Which reader reads which files, group by group, before anything is read; and what
    the inputs are, so that no output of any command is written over one of them."""

    groups: list[list[tuple[Reader, list[Path]]]] = field(default_factory=list)
    ignored: list[Path] = field(default_factory=list)
    total_bytes: int = 0
    max_line: int = DEFAULT_MAX_LINE
    seen: set[Path] = field(default_factory=set)  # every file claimed, resolved
    inodes: set[tuple[int, int]] = field(default_factory=set)  # theirs (hard links too)
    folders: set[Path] = field(default_factory=set)  # every directory walked, resolved
    # What was asked for, `absolute` (as given, symlinks kept): each path argument, each
    # directory argument's files as the walk found them, and each file's size and mtime
    # (in nanoseconds) before anything is read (one that changes while it is read is
    # found changed later), the files no reader claimed too (one that changes may be read
    # by the next load).
    # An index file keeps them: from any folder it knows what it was built from and
    # whether that changed since.
    arguments: list[Path] = field(default_factory=list)
    listed: dict[Path, list[Path]] = field(default_factory=dict)
    stamps: dict[Path, tuple[int, int]] = field(default_factory=dict)  # (size, mtime_ns)
    # What came from object storage: each argument's URL (by its local view), each local
    # copy's object, each URL argument's objects as listed; and what fetching them did.
    urls: dict[Path, str] = field(default_factory=dict)
    objects: dict[Path, Object] = field(default_factory=dict)
    listings: dict[str, list[Object]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def keep(self, path: Path) -> None:
        """Count `path` among the inputs that no output may replace, though no reader reads
        it here (an index file, and the saved files it was built from)."""
        self.seen.add(path.resolve())
        try:
            st = path.stat()
        except OSError:
            return  # gone: nothing to write over
        self.inodes.add((st.st_dev, st.st_ino))

    @property
    def files(self) -> list[tuple[str, Path]]:
        return [(r.name, p) for g in self.groups for r, ps in g for p in ps]

    def refuse_output(self, out: Path) -> None:
        """Raise LoadError if writing `out` would write over a saved file that is read, by
        any path to it (symlinks resolved, a hard link by its inode), or into a directory
        that is read (whatever the file: the next load of that directory would read it)."""
        target = out.resolve()
        try:
            found = os.stat(target)
        except OSError:
            found = None
        if target in self.seen or found is not None and (found.st_dev, found.st_ino) in \
                self.inodes:
            raise LoadError(str(out), None, "is one of the inputs: write to another file "
                            "(saved files are only ever read)")
        if (folder := self.read_folder_of(out)) is not None:
            raise LoadError(str(out), None, f"is inside {folder}, a directory of saved runs "
                            "that is read: write it elsewhere (saved files are only ever "
                            "read, and the next load of the directory would read it too)")

    def read_folder_of(self, out: Path) -> Path | None:
        """The directory of saved runs that is read which `out` is inside, if any."""
        target = out.resolve()
        return next((f for f in (target, *target.parents) if f in self.folders), None)


def absolute(path: Path) -> Path:
    """`path` absolute as given (symlinks kept), but for the `..` that lead it, applied to
    the folder it is given from: that folder's path is physical (no symlink), so this is
    exact, and names the same file once that folder is gone (`index ../runs` in a build
    folder removed since). A `..` after a name stays (the name may be a symlink)."""
    parts = path.parts
    ups = next((i for i, part in enumerate(parts) if part != ".."), len(parts))
    if path.is_absolute() or ups == 0:
        return path.absolute()
    base = Path.cwd()
    for _ in range(ups):
        base = base.parent
    return base.joinpath(*parts[ups:])


def _head(path: Path, max_line: int) -> bytes:
    """The first non-blank line of a file, whole (up to the line cap: readers detect their
    format by parsing it, so detection must not depend on the line's length)."""
    try:
        with path.open("rb") as f:
            for _ in range(100):
                line = f.readline(max_line + 1)
                if len(line) > max_line and not line.endswith(b"\n"):
                    return LineTooLong(line[:200])
                if line.strip() or not line:
                    return line
            return b""
    except OSError as e:
        raise LoadError(str(path), None, f"cannot read: {e.strerror or e}") from None


def _claim(path: Path, max_line: int) -> Reader | None:
    head = _head(path, max_line)
    if isinstance(head, LineTooLong):
        raise LoadError(str(path), 1, f"the first line is longer than {max_line} bytes (the "
                        "cap, --max-line-size); raise the cap if it is meant to be this long")
    return next((r for r in READERS if r.detect(path, head)), None)


def _walk(root: Path, folders: set[Path]) -> Iterator[Path]:
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=_raise_walk):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        folders.add(Path(dirpath).resolve())
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            # a dangling symlink is yielded too, so that it is named, not silently passed by
            if not name.startswith(".") and (path.is_file() or path.is_symlink()):
                yield path


def listing(root: Path) -> list[Path]:
    """The files a load of the directory `root` considers, as `plan` walks it."""
    return list(_walk(root, set()))


def claimed(path: Path) -> bool:
    """Whether a load would read `path` (a reader claims it, or reading it fails)."""
    try:
        return _claim(path, DEFAULT_MAX_LINE) is not None
    except LoadError:
        return True


def _raise_walk(error: OSError) -> None:
    raise LoadError(str(error.filename), None, f"cannot read: {error.strerror or error}")


def _group(paths: Sequence[Path], plan: Plan, explicit: bool,
           ctx: LoadContext | None) -> list[tuple[Reader, list[Path]]]:
    by_reader: dict[str, tuple[Reader, list[Path]]] = {}
    for path in paths:
        try:  # every file considered, read or not: an index tells if a load would now read it
            plan.stamps[path] = (st := path.stat()).st_size, st.st_mtime_ns
        except OSError:
            pass  # a dangling symlink: named when it is claimed
        resolved = path.resolve()
        if resolved in plan.seen:
            continue  # the same file twice would be the same run twice
        plan.seen.add(resolved)
        try:
            reader = _claim(path, plan.max_line)
        except LoadError as error:
            if ctx is None:
                raise
            ctx.bad(error)  # an unreadable file: stop, or note it when skipping
            continue
        if reader is None:
            if explicit:
                why = _unclaimed(path, plan.max_line)
                raise LoadError(why.file, why.line, "not a saved-run format replay-server "
                                f"reads: {why.reason}\n{_formats()}")
            if (cut := _not_json(path, plan.max_line)) is not None:
                if ctx is None:
                    raise cut
                ctx.bad(cut)  # a damaged saved file, not one of no known format
                continue
            plan.ignored.append(path)
            continue
        by_reader.setdefault(reader.name, (reader, []))[1].append(path)
        st = path.stat()
        plan.total_bytes += st.st_size
        plan.inodes.add((st.st_dev, st.st_ino))
    return list(by_reader.values())


def _not_json(path: Path, max_line: int) -> LoadError | None:
    """`FILE:1: not valid JSON ...` for a `.jsonl` file whose first line is no JSON: a
    damaged file (a bad copy, a recorder cut on its first line), which a load names as a
    bad line, in a directory too (where a file of no known format is passed by)."""
    if path.suffix != ".jsonl":
        return None
    head = _head(path, max_line)
    try:
        orjson.loads(head)
    except orjson.JSONDecodeError as e:
        return LoadError(str(path), 1, line_not_json(e)) if head.strip() else None
    return None


# The first bytes of an SQLite database: an index file (index/file.py writes them).
INDEX_MAGIC = b"SQLite format 3\x00"


def is_index(path: Path) -> bool:
    """Whether `path` is an index file rather than a saved run."""
    try:
        with path.open("rb") as f:
            return f.read(len(INDEX_MAGIC)) == INDEX_MAGIC
    except OSError:
        return False


def _unclaimed(path: Path, max_line: int) -> LoadError:
    """What a file no reader claims is, from its first line: for the user to see why, and
    which of the formats (`_formats`) it was meant to be."""
    if is_index(path):
        return LoadError(str(path), None, "an index file (written by `replay-server index`): "
                         "`serve` and `run` open one, on its own; give this command the saved "
                         "files it was built from")
    head = _head(path, max_line)
    if not head.strip():
        return LoadError(str(path), None, "empty")
    if (cut := _not_json(path, max_line)) is not None:
        return cut
    try:
        value = orjson.loads(head)
    except orjson.JSONDecodeError:
        return LoadError(str(path), None, "not JSON lines, and no reader claims it by its name")
    if not isinstance(value, dict):
        return LoadError(str(path), 1, "JSON, but not an object")
    keys = ", ".join(sorted(value)[:12]) + (", ..." if len(value) > 12 else "")
    return LoadError(str(path), 1, f"a JSON object of a shape no reader claims (keys: {keys})")


def _formats() -> str:
    return "replay-server reads:\n" + "\n".join(f"  - {r.expects}" for r in READERS)


def _nothing_read(folder: Path, ignored: Sequence[Path], max_line: int) -> LoadError:
    """A directory where no reader claims a file: each file (the first SHOWN) and why."""
    named = [f"  {_unclaimed(path, max_line)}" for path in ignored[:SHOWN]]
    if len(ignored) > SHOWN:
        named.append(f"  and {len(ignored) - SHOWN} more")
    what = ": no reader claims any of its files:" if ignored else " (nor any file but hidden ones)"
    return LoadError(str(folder), None, "no saved generations found in this directory"
                     + what + "\n" + "\n".join([*named, _formats()]))


def plan(paths: Sequence[str | Path], ctx: LoadContext | None = None) -> Plan:
    """Find and claim every file, raising LoadError for a path that holds nothing to serve
    (or, with a context that skips bad lines, for nothing worse than unreadable files)."""
    result = Plan(max_line=ctx.max_line if ctx is not None else DEFAULT_MAX_LINE)
    fetched = fetch(paths, lambda total, what: progress_bar(total, what, True))
    result.urls, result.objects = fetched.urls, fetched.objects
    result.listings, result.notes = fetched.listings, fetched.notes
    files: list[Path] = []
    for raw in fetched.paths:
        path = Path(raw)
        if not path.exists():
            raise LoadError(str(path), None, "no such file or directory")
        if (node := not_a_file(path)) is not None:  # `serve <(zcat run.jsonl.gz)`
            raise LoadError(str(path), None, f"{node}, not a saved file: a saved run is "
                            "read more than once; save it to a file first")
        result.arguments.append(absolute(path))
        if path.is_dir():
            first = len(result.ignored)
            # a URL's view is not a folder of the user's: its objects were listed instead
            walked = list(_walk(path, set() if path in result.urls else result.folders))
            if path not in result.urls:
                result.listed[absolute(path)] = [absolute(p) for p in walked]
            group = _group(walked, result, explicit=False, ctx=ctx)
            if not group:
                raise _nothing_read(path, result.ignored[first:], result.max_line)
            result.groups.append(group)
        else:
            files.append(path)
    if files:
        result.groups.append(_group(files, result, explicit=True, ctx=ctx))
    return result


def read(planned: Plan, ctx: LoadContext) -> Iterator[Record]:
    """Every record of every group, in saved order; then the records a reader deferred
    until every group was read (`LoadContext.deferred`)."""
    for group in planned.groups:
        for reader, files in group:
            yield from reader.read(files, ctx)
    while ctx.deferred:
        yield from ctx.deferred.pop(next(iter(ctx.deferred))).records(ctx)


def progress_bar(total: int, what: str, enabled: bool, unit: str = "B") -> tqdm[Any]:
    """A progress bar on stderr (of bytes, or of `unit`), shown only on a terminal and
    after half a second."""
    return tqdm(total=total, unit=unit, unit_scale=True, desc=what, delay=0.5, leave=False,
                disable=not (enabled and sys.stderr.isatty()))


def context(*, skip_bad_lines: bool = False, max_line: int = DEFAULT_MAX_LINE,
            tokenizer: str | None = None) -> LoadContext:
    """How files are read, with the tokenizer loaded (a LoadError names a bad one)."""
    ctx = LoadContext(skip_bad_lines=skip_bad_lines, max_line=max_line)
    ctx.tokenizer = tokenizer_of(tokenizer)
    return ctx


def tokenizer_of(path: str | None) -> LocalTokenizer | None:
    """The tokenizer `--tokenizer` names (None: none), loaded; a LoadError names a bad
    one. A process loads it once and hands it to whatever needs it (the readers, the
    replay of tokenizer calls): loading it takes time, and holds its vocabulary."""
    if not path:
        return None
    from . import local_tokenizer
    try:
        return local_tokenizer.load_tokenizer(path)
    except (local_tokenizer.TokenizerError, OSError, ValueError) as e:
        raise LoadError(str(path), None, f"--tokenizer: {e}") from None
