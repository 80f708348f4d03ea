"""The index cache: saved files are served through an index file (`index/file.py`) built
the first time they are served and kept, so that a run served before starts at once and
every run is served one way (memory-mapped: little memory, `--workers N` for files too).

An entry is named by two digests: of what was asked (`Key.inputs`: the arguments, as
absolute paths, the options that change what is built and the environment variables the
readers read, `formats.ENVIRONMENT`), then of what that is now (`Key.identity`: each
planned file's absolute path, size, mtime in nanoseconds and a digest of its whole
content, the files the tokenizer is read from, the index format's, key's and
replay-server's versions, and a digest of replay-server's own code: an editable install
whose readers changed keeps its version string). A changed file is a new name, so it is
built again: never a stale answer. The content digest is there because size and mtime
can be copied (`cp -p`, `touch -r`, rsync): xxh3-128 of the file through a memory map,
some 0.25 s for 3 GB in the page cache (sha256 is 6-7x slower, and a cache key needs no
cryptographic strength: nobody picks the saved files to collide with themselves;
docs/performance.md). The files are digested again after the load: a file rewritten
while it was read (even to the same size and mtime) leaves its index out of the cache.

An entry is written whole under a temporary name and renamed (`file.write`): two starts
at once both build, and the second rename wins; neither reads half a file. One written
for the same inputs replaces the entries of their earlier identities (a re-recorded run
does not grow the cache). An entry that cannot be opened whole (truncated, garbage, another
version) is built again; a cache that cannot be written gives a temporary index, removed
at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import xxhash

from .. import __version__
from ..errors import LoadError
from ..saved.formats import ENVIRONMENT, LoadContext
from ..saved.loader import Plan, plan, tokenizer_of
from ..saved.local_tokenizer import LocalTokenizer, read_from
from ..settings import DEFAULT_MAX_LINE
from ..wire import keys
from . import file, heap
from .cache_folder import hold, indexes_dir, keep, release, remove_unused, summary
from .index import prompt_of
from .loading import load, report_lines
from .sources import digest, identity

REPORT = "load_report"  # the meta row that keeps what the load said (JSON lines)
EXAMPLES = "load_examples"  # and the first saved prompt of each endpoint, for the snippet
NAME = "cache_entry"  # and the name it was built under: one found under another is refused


@dataclass(frozen=True)
class Options:
    """The options that change what a load builds (aliases do not: applied at open)."""

    skip_bad_lines: bool = False
    max_line: int = DEFAULT_MAX_LINE
    tokenizer: str | None = None


@dataclass(frozen=True)
class Key:
    """An entry's name: what was asked, then what it is now."""

    inputs: str
    identity: str

    @property
    def name(self) -> str:
        return f"{self.inputs}-{self.identity}.idx"


@functools.cache
def code() -> str:
    """A digest of every file of the replay_server package, read once a process: the
    readers and the index writer are what builds an entry (some 10 ms for its ~170
    files; an installed release and an editable checkout alike)."""
    root = Path(__file__).resolve().parent.parent
    hashed = xxhash.xxh3_128()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and
                       "__pycache__" not in p.parts):
        hashed.update(orjson.dumps([str(path.relative_to(root)), digest(path)]))
    return hashed.hexdigest()


def key_of(planned: Plan, options: Options, urls: Mapping[Path, str]) -> Key:
    """The key of a planned load with `options`, its arguments named by their URLs where
    they are fetched objects' local views (`urls`: each view's changes with the objects).
    A file that changes while it is digested or loaded is found changed when the key is
    made again after the load (`_changed`)."""
    def hashed(value: object) -> str:
        return hashlib.sha256(orjson.dumps(value)).hexdigest()[:24]

    asked = [[urls.get(p, str(p)) for p in planned.arguments],
             options.skip_bad_lines, options.max_line, options.tokenizer and
             str(Path(options.tokenizer).absolute()),
             {name: os.environ.get(name) for name in ENVIRONMENT}]
    files = [[str(path.absolute()), *identity(path)] for _, path in planned.files]
    tokenizer = [[str(p.absolute()), digest(p)]
                 for p in (read_from(options.tokenizer) if options.tokenizer else [])]
    versions = [file.VERSION, keys.KEY_VERSION, __version__, code()]
    return Key(hashed(asked), hashed([files, tokenizer, versions]))


@dataclass
class Cached:
    """Saved files as served: their index file, what their load said, the tokenizer."""

    index: file.StoredIndex
    report: list[str]
    tokenizer: LocalTokenizer | None
    inputs: Plan  # the files it came from: what no output may replace

    @property
    def examples(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(endpoint, model, keyed prompt): the first saved prompt of each endpoint, as
        the load found them (`Loaded.examples`)."""
        return [tuple(e) for e in orjson.loads(self.index.meta[EXAMPLES])]


def open_cached(paths: Sequence[str | Path], options: Options,
                aliases: dict[str, str] | None = None, urls: Mapping[Path, str] | None = None
                ) -> Cached:
    """The index of the saved files `paths` (`urls`: the URL of each fetched objects' local
    view among them): the cached one if these files were indexed before with these
    options, else built now (and kept, when the cache can be written)."""
    planned = plan(paths, LoadContext(skip_bad_lines=options.skip_bad_lines,
                                      max_line=options.max_line))
    key = key_of(planned, options, urls or {})
    entry = indexes_dir() / key.name
    notes: list[str] = []
    if (lock := hold(entry)) is not None:  # (kept while served: cache_folder.py)
        hit = _open_entry(entry, lock, aliases, notes)
        if hit is not None:
            built = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(
                hit.meta["built"])))
            report = [f"replay-server: these files were indexed before: serving the index "
                      f"{entry} (built {built}); what that load said:",
                      *orjson.loads(hit.meta[REPORT])]
            return Cached(hit, notes + report, tokenizer_of(options.tokenizer), planned)
    target = _target(entry, planned, notes)
    return _build(paths, key, target, options, aliases, notes, urls or {})


def _open_entry(entry: Path, lock: int, aliases: dict[str, str] | None, notes: list[str]
                ) -> file.StoredIndex | None:
    """The cached index `entry`, opened whole; None (said in `notes`, the entry removed)
    if it cannot be: it is then built again."""
    try:
        index: file.StoredIndex | None = file.StoredIndex(entry, aliases)
        why = ""
    except LoadError as e:
        why, index = e.reason, None
    if index is not None and not {REPORT, EXAMPLES, NAME} <= set(index.meta):
        index.db.close()
        why, index = "it holds no load report (not written by the cache)", None
    if index is not None and index.meta[NAME] != entry.name:
        index.db.close()
        why, index = f"it was built for other files, as {index.meta[NAME]}", None
    if index is None:
        notes.append(f"replay-server: the cached index {entry} cannot be used ({why}): "
                     "building it again")
        release(lock)
        with contextlib.suppress(OSError):
            entry.unlink(missing_ok=True)
        return None
    with contextlib.suppress(OSError):  # (a cache that cannot be written: not said)
        os.utime(entry)  # last used (`replay-server cache`)
    return keep(lock, index)


def _build(paths: Sequence[str | Path], key: Key, target: Path, options: Options,
           aliases: dict[str, str] | None, notes: list[str], urls: Mapping[Path, str]
           ) -> Cached:
    """Load the files, write their index into `target` (the cache's entry, or a temporary
    file), free the load, and open the index."""
    folder = indexes_dir()
    loaded = load(paths, skip_bad_lines=options.skip_bad_lines, max_line=options.max_line,
                  tokenizer=options.tokenizer)
    report, tokenizer, planned = report_lines(loaded), loaded.ctx.tokenizer, loaded.plan
    examples = [(r.endpoint, r.model, prompt_of(r)) for _, r in sorted(loaded.examples.items())]
    if target.parent == folder and _changed(key, planned, options, urls):
        target = _temporary()
        notes.append("replay-server: the saved files changed while they were read: their "
                     f"index is not kept in the cache (built into {target}, removed at "
                     "exit)")
    file.write(loaded, target, {REPORT: orjson.dumps(report).decode(),
                                EXAMPLES: orjson.dumps(examples).decode(), NAME: key.name})
    del loaded  # (no cycle holds it: freed here, whole)
    heap.trim()  # what the load held goes back to the system: the index is on disk
    lock = hold(target) if target.parent == folder else None
    if target.parent == folder:
        _supersede(folder, key)
        notes.append(f"replay-server: indexed into the cache: {target} (the cache: "
                     f"{summary()}; `replay-server cache` lists it)")
    index = file.StoredIndex(target, aliases)  # (removed once written: the open says so)
    return Cached(index if lock is None else keep(lock, index), notes + report, tokenizer,
                  planned)


def _target(entry: Path, planned: Plan, notes: list[str]) -> Path:
    """`entry`, if its folder can be written and is not inside a folder of saved runs
    that is read (the next load of it would read the index too); else a temporary file
    (said in `notes`)."""
    if (read := planned.read_folder_of(entry)) is not None:
        why = f"is inside {read}, a directory of saved runs that is read"
    else:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=entry.parent, prefix=".probe-"):
                pass
            return entry
        except OSError as e:
            why = f"cannot be written ({e.strerror or e})"
    temporary = _temporary(f"the cache {entry.parent} {why}")
    notes.append(f"replay-server: the cache {entry.parent} {why}: the index is built into "
                 f"{temporary}, removed at exit (set REPLAY_SERVER_CACHE to a folder that "
                 "can be written, outside the saved runs, to keep it)")
    return temporary


def _temporary(why: str = "the saved files changed while they were read") -> Path:
    """A temporary index file, removed when the process exits; a LoadError saying what to
    do when no folder for one can be written either (a container with a read-only root
    and no volume for the cache)."""
    try:
        fd, name = tempfile.mkstemp(prefix="replay-server-", suffix=".idx")
    except OSError as e:  # (FileNotFoundError: no usable temporary directory)
        raise LoadError(str(indexes_dir()), None, f"saved files are served through an index "
                        f"file, and there is nowhere to write it: {why}, and no temporary "
                        f"folder can be written either ({e.strerror or e}); set "
                        "REPLAY_SERVER_CACHE to a folder that can be written (in a "
                        "container with a read-only root: a volume mounted there)") from None
    os.close(fd)
    path = Path(name)
    atexit.register(path.unlink, missing_ok=True)
    return path


def _changed(key: Key, planned: Plan, options: Options, urls: Mapping[Path, str]) -> bool:
    """Whether the files the load read are not those the key was made of, as they were:
    their key made again, whole (a second digest of each: some 0.25 s for 3 GB, beside a
    load that takes seconds). A file changed and changed back during the load itself
    is beyond it: only a digest of the very bytes the readers read could see that."""
    try:
        return key_of(planned, options, urls).identity != key.identity
    except OSError:
        return True


def _supersede(folder: Path, key: Key) -> None:
    """Remove the entries of the same inputs and other identities (but those served)."""
    for old in folder.glob(f"{key.inputs}-*.idx"):
        if old.name != key.name:
            remove_unused(old)
