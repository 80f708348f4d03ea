"""The compact on-disk index: a saved run compiled once into one SQLite file.

`replay-server index PATHS -o RUN.idx` reads the saved files exactly as `serve` does and
writes what the server needs; `serve RUN.idx` then starts in the time it takes to check
that the saved files are those it was built from (`sources.py`: a digest of each, some
0.25 s for 3 GB in the page cache; nothing when they are not here), keeps little in
memory, and several worker processes share one copy (pages are read through a shared,
read-only memory map).

    meta(name, value)              format, version, key version, what it was built from
                                   (`sources.record`), the recorded tokenizer answers
                                   (`tokenizer`, JSON)
    models(id, name, records, samples, unusable_records, prompts)
    entries(id INTEGER PRIMARY KEY, v)
                                   id = model id << 48 | the key's first 6 bytes, so that a
                                   lookup is one search of the table's own B-tree (a BLOB
                                   key would search an index, then the table); v = the
                                   bucket of the keys that share the id (one, all but once
                                   in a few million): each key, its entry's length (4
                                   bytes) and its encoded entry, sealed together
    prompts(id, model_id, kind, prompt, place)
                                   every saved prompt (canonical JSON), sorted bytewise per
                                   model and kind, for miss diagnostics by binary search
                                   on `id` (see catalog.py)
    prompt_ranges(model_id, kind, first, last)
    responses(k BLOB PRIMARY KEY, previous, v)
                                   k = model id + a saved Responses answer's id; previous =
                                   what a request continuing it is keyed with, v = its
                                   exchange encoded alone (both NULL: two conversations
                                   share the id)

Entries, responses and prompts are encoded and sealed (`encoding.py`). A damaged file (a
bad copy, a disk fault) never serves a damaged answer nor answers 500: what is read when
it is opened (meta, models, prompt ranges: a few rows) is checked whole against the seal
kept in `meta`, and refused with a LoadError; every other value is checked where it is
read, and one that cannot be read (SQLite's `DatabaseError`, or a failed seal) answers
that request `IndexDamaged` (400, `replay_unusable`), naming the file, while the rest is
served. Checking every page at start instead (`PRAGMA quick_check`) would cost some 0.1-0.3 s
per 100,000 records, and never finds damaged content: four overwritten bytes in an answer
pass it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from functools import partial
from itertools import groupby
from pathlib import Path
from typing import Any, TypeVar

import orjson
from tqdm import tqdm

from ..errors import IndexDamaged, LoadError
from ..saved.loader import progress_bar
from ..saved.writer import written_whole
from ..wire import keys
from ..wire.families import BY_KIND
from ..wire.keys import KEY_BYTES
from . import sources
from .catalog import EMPTY, Catalog
from .encoding import Damaged, checksum, decode, encode, seal, unseal
from .index import Entry, Exchange, Index, ModelRun, SavedResponse
from .loading import Loaded
from .samples import needs_cursor

FORMAT = "replay-server index"
VERSION = 5
MMAP_BYTES = 1 << 40
_Row = TypeVar("_Row")


_SCHEMA = """
CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT);
CREATE TABLE models(id INTEGER PRIMARY KEY, name TEXT UNIQUE, records INTEGER,
                    samples INTEGER, unusable_records INTEGER, prompts INTEGER);
CREATE TABLE entries(id INTEGER PRIMARY KEY, v BLOB);
CREATE TABLE prompts(id INTEGER PRIMARY KEY, model_id INTEGER, kind TEXT, prompt BLOB,
                     place BLOB);
CREATE TABLE prompt_ranges(model_id INTEGER, kind TEXT, first INTEGER, last INTEGER,
                           PRIMARY KEY(model_id, kind));
CREATE TABLE responses(k BLOB PRIMARY KEY, previous BLOB, v BLOB);
"""


# A new file, written once from start to end, then renamed: nothing to roll back, no one
# else reading it, no crash to survive (a half-written file is deleted, or left as a
# temporary file). Pages of 16 KiB: with SQLite's default 4 KiB, one or two entries of a few
# KiB fit a page, and a fifth of the file is left empty. Rows go in in key order (and
# prompts in catalog order), so the file needs no VACUUM after.
_WRITING = """
PRAGMA page_size=16384; PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
PRAGMA locking_mode=EXCLUSIVE; PRAGMA cache_size=-65536;
"""


def write(loaded: Loaded, out: Path, notes: Mapping[str, str] | None = None) -> int:
    """Compile a loaded run into `out` (written beside it, then renamed); returns the
    number of prompts. `notes` are more `meta` rows, sealed with the rest (the index
    cache keeps the load's report there)."""
    loaded.plan.refuse_output(out)
    runs = loaded.index.models.values()
    rows = sum(len(run.entries) + len(run.responses) for run in runs) + sum(
        len(catalog) for catalog in loaded.index.catalogs.values())
    # (some 20 µs a row: a run of a million records is half a minute of writing)
    with written_whole(out) as tmp, progress_bar(rows, "writing the index", True,
                                                 unit=" rows") as bar:
        db = sqlite3.connect(tmp)
        db.executescript(_WRITING + _SCHEMA)
        model_ids = {name: i for i, name in enumerate(sorted(loaded.index.models), start=1)}
        _write_entries(db, loaded.index, model_ids, bar)
        _write_prompts(db, loaded, model_ids, bar)
        cursors = sum(1 for run in loaded.index.models.values() for v in run.entries.values()
                      if needs_cursor(v))
        meta = {"format": FORMAT, "version": str(VERSION), "key_version": str(keys.KEY_VERSION),
                "built": str(time.time()), **sources.record(loaded.plan),
                "cursor_prompts": str(cursors), "tokenizer": _tokenizer_meta(loaded.index),
                "content": loaded.index.content, **(notes or {})}
        meta["seal"] = _start_seal(meta, *_start_rows(db))
        db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        db.commit()
        db.close()
    return sum(len(run.entries) for run in loaded.index.models.values())


def _counted(rows: Iterable[_Row], bar: tqdm[Any]) -> Iterator[_Row]:
    """`rows`, the progress bar moved on every few thousand of them."""
    done = 0
    for done, row in enumerate(rows, start=1):
        if done % 4096 == 0:
            bar.update(4096)
        yield row
    bar.update(done % 4096)


def _write_entries(db: sqlite3.Connection, index: Index, ids: dict[str, int],
                   bar: tqdm[Any]) -> None:
    for name, run in index.models.items():
        db.execute("INSERT INTO models VALUES (?, ?, ?, ?, ?, ?)",
                   (ids[name], name, run.records, run.samples, run.unusable_records,
                    len(run.entries)))
        model_id = ids[name]
        buckets = groupby(_counted(sorted(run.entries), bar), key=partial(_row_id, model_id))
        db.executemany("INSERT INTO entries VALUES (?, ?)", (
            (row_id, seal(b"".join(_bucketed(key, encode(run.entries[key])) for key in keys)))
            for row_id, keys in buckets))
        prefix = model_id.to_bytes(2, "big")
        db.executemany("INSERT INTO responses VALUES (?, ?, ?)", _counted((
            (prefix + rid.encode(), None if saved is None else seal(saved.previous),
             None if saved is None else seal(encode(saved.exchange)))
            for rid, saved in run.responses.items()), bar))


_ID_BYTES = 6  # of the key, in its `entries` row id (the model id above them)


def _row_id(model_id: int, key: bytes) -> int:
    """The `entries` row of a model's key: the model id, then the key's first 6 bytes
    (a positive 64-bit integer: at most 32,767 models)."""
    if not 0 < model_id < 1 << 15 or len(key) != KEY_BYTES:
        raise ValueError(f"model id {model_id} or key {key.hex()} out of the index's range")
    return model_id << 8 * _ID_BYTES | int.from_bytes(key[:_ID_BYTES], "big")


def _bucketed(key: bytes, value: bytes) -> bytes:
    return key + len(value).to_bytes(4, "little") + value


def _unbucketed(bucket: bytes) -> Iterator[tuple[bytes, int, int]]:
    """Each key of a bucket, in key order, with where its encoded entry lies in it."""
    at = 0
    while at < len(bucket):
        start = at + KEY_BYTES + 4
        end = start + int.from_bytes(bucket[at + KEY_BYTES:start], "little")
        yield bucket[at:at + KEY_BYTES], start, end
        at = end


def _start_rows(db: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
    """The models and prompt ranges, as the file is opened with them."""
    return (db.execute("SELECT id, name, records, samples, unusable_records, prompts "
                       "FROM models ORDER BY id").fetchall(),
            db.execute("SELECT model_id, kind, first, last FROM prompt_ranges "
                       "ORDER BY model_id, kind").fetchall())


def _start_seal(meta: dict[str, str], models: list[Any], ranges: list[Any]) -> str:
    """The seal of what is read when the file is opened (meta but its seal, the models,
    the prompt ranges)."""
    rows = [sorted((k, v) for k, v in meta.items() if k != "seal"), models, ranges]
    return checksum(orjson.dumps(rows)).hex()


def _tokenizer_meta(index: Index) -> str:
    """The recorded tokenizer answers, per model (few and small beside the generations:
    kept whole in `meta`, read into memory when the file is opened)."""
    return orjson.dumps({
        name: {"max_model_len": run.max_model_len,
               "answers": {key.hex(): None if body is None else body.decode()
                           for key, body in run.tokenizer.items()}}
        for name, run in index.models.items()
        if run.tokenizer or run.max_model_len is not None}).decode()


def _write_prompts(db: sqlite3.Connection, loaded: Loaded, ids: dict[str, int],
                   bar: tqdm[Any]) -> None:
    """Every saved prompt, from the catalogs built with the index (already sorted)."""
    for (name, kind), catalog in sorted(loaded.index.catalogs.items()):
        first = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM prompts").fetchone()[0]
        db.executemany("INSERT INTO prompts(model_id, kind, prompt, place) VALUES (?, ?, ?, ?)",
                       _counted(((ids[name], kind, seal(p), seal(w.encode()))
                                 for p, w in catalog.items()), bar))
        db.execute("INSERT INTO prompt_ranges VALUES (?, ?, ?, ?)",
                   (ids[name], kind, first, first + len(catalog) - 1))


class Pages:
    """The index file's rows, read so that damage is told: SQLite's `DatabaseError` (a
    damaged page) and a value whose seal fails are `IndexDamaged`, naming the file."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db, self.path = db, path

    def row(self, sql: str, args: tuple[Any, ...]) -> Any:
        try:
            return self.db.execute(sql, args).fetchone()
        except sqlite3.DatabaseError as e:
            raise self.damaged(str(e)) from None

    def rows(self, sql: str, args: tuple[Any, ...]) -> Iterator[Any]:
        try:
            yield from self.db.execute(sql, args)
        except sqlite3.DatabaseError as e:
            raise self.damaged(str(e)) from None

    def value(self, sealed: Any) -> bytes:
        """A sealed value, checked (a row that must be there and is not: damaged too)."""
        try:
            if not isinstance(sealed, bytes):
                raise Damaged("a saved value is missing")
            return unseal(sealed)
        except Damaged as e:
            raise self.damaged(str(e)) from None

    def damaged(self, why: str) -> IndexDamaged:
        return IndexDamaged(f"the index file {self.path} is damaged ({why}): this request "
                            "cannot be answered from it. Rebuild it from the saved files "
                            "with `replay-server index` (or serve the saved files)")


class StoredEntries:
    """The entries of one model, looked up in the index file (a read-only mapping)."""

    def __init__(self, pages: Pages, model_id: int, count: int) -> None:
        self.pages = pages
        self.row_ids = _row_id(model_id, bytes(KEY_BYTES))  # (the model's part of its ids)
        self.count = count

    def get(self, key: bytes) -> Entry | Exchange | None:
        if len(key) != KEY_BYTES:
            return None
        row = self.pages.row("SELECT v FROM entries WHERE id = ?",
                             (self.row_ids | int.from_bytes(key[:_ID_BYTES], "big"),))
        if row is None:
            return None
        bucket = self.pages.value(row[0])
        for k, start, end in _unbucketed(bucket):
            if k == key:
                return decode(bucket[start:end])
        return None  # (another key of the same row: a miss)

    def __len__(self) -> int:
        return self.count

    def items(self) -> Iterator[tuple[bytes, Entry | Exchange]]:
        """In key order."""
        for _, v in self.pages.rows("SELECT id, v FROM entries WHERE id >= ? AND id < ? "
                                    "ORDER BY id", (self.row_ids,
                                                    self.row_ids + (1 << 8 * _ID_BYTES))):
            bucket = self.pages.value(v)
            for key, start, end in _unbucketed(bucket):
                yield key, decode(bucket[start:end])

    def values(self) -> Iterator[Entry | Exchange]:
        return (v for _, v in self.items())


class StoredCatalog(Catalog):
    """The catalog of one model and kind in the index file: rows `first`..`last` of the
    `prompts` table, written in catalog order, read by position as the bisection asks.
    Every miss's bisection reads the same rows first (the middles of the whole catalog,
    then of its halves): the rows read are kept, the first up to `KEPT` bytes, so that
    a run of misses reads most of each bisection from memory, and only its last steps
    from the file (a bounded cache: the catalog itself is the size of the saved runs)."""

    KEPT = 8 << 20

    def __init__(self, pages: Pages, first: int, last: int) -> None:
        self.pages, self.first, self.last = pages, first, last
        self._kept: dict[int, bytes] = {}
        self._room = self.KEPT

    def __len__(self) -> int:
        return self.last - self.first + 1

    def prompt(self, i: int) -> bytes:
        found = self._kept.get(i)
        if found is not None:
            return found
        row = self.pages.row("SELECT prompt FROM prompts WHERE id = ?", (self.first + i,))
        value = self.pages.value(row and row[0])
        if len(value) <= self._room:
            self._kept[i] = value
            self._room -= len(value)
        return value

    def where(self, i: int) -> str:
        row = self.pages.row("SELECT place FROM prompts WHERE id = ?", (self.first + i,))
        return self.pages.value(row and row[0]).decode()


class StoredIndex(Index):
    """An Index whose entries and prompt catalog stay in the index file."""

    def __init__(self, path: Path, aliases: dict[str, str] | None = None) -> None:
        uri = f"file:{path.resolve()}?mode=ro&immutable=1"
        try:
            db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            meta = dict(db.execute("SELECT name, value FROM meta").fetchall())
            model_rows, range_rows = _start_rows(db)
        except sqlite3.DatabaseError as e:
            raise LoadError(str(path), None, f"not a replay-server index (or a damaged "
                            f"one): {e}") from None
        _check_meta(path, meta)
        if meta.get("seal") != _start_seal(meta, model_rows, range_rows):
            raise LoadError(str(path), None, "damaged: what is read when it is opened (its "
                            "models, prompt ranges and meta) fails its checksum; rebuild it "
                            "from the saved files with `replay-server index`")
        self.path, self.db, self.meta = path, db, meta
        self.pages = Pages(db, path)
        self.sources = sources.Sources(path, meta)
        models: dict[str, ModelRun] = {}
        for model_id, name, records, samples, unusable, prompts in model_rows:
            run = ModelRun(name, records=records, samples=samples, unusable_records=unusable)
            run.entries = StoredEntries(self.pages, model_id, prompts)  # type: ignore[assignment]
            models[name] = run
        for name, saved in orjson.loads(meta.get("tokenizer", "{}")).items():
            models[name].max_model_len = saved["max_model_len"]
            models[name].tokenizer = {bytes.fromhex(k): None if v is None else v.encode()
                                      for k, v in saved["answers"].items()}
        self.model_ids = {name: model_id for model_id, name, *_ in model_rows}
        self.ranges = {(model_id, kind): (first, last)
                       for model_id, kind, first, last in range_rows}
        self.catalogs_read: dict[tuple[int, str], Catalog] = {}
        super().__init__(models, aliases)
        self._content = meta.get("content", "")  # (an older file: not known)

    def saved_response(self, model: str, response_id: str) -> SavedResponse | None:
        row = self.pages.row("SELECT previous, v FROM responses WHERE k = ?", (
            self.model_ids[model].to_bytes(2, "big") + response_id.encode(),))
        if row is None:
            return None
        if row[0] is None:
            raise ValueError(f"two different saved conversations have the response id "
                             f"{response_id!r}")
        exchange = decode(self.pages.value(row[1]))
        assert isinstance(exchange, Exchange)
        return SavedResponse(self.pages.value(row[0]), exchange)

    def response_models(self, response_id: str) -> list[str]:
        return [name for name, model_id in self.model_ids.items()
                if self.pages.row("SELECT 1 FROM responses WHERE k = ?", (
                    model_id.to_bytes(2, "big") + response_id.encode(),))]

    def catalog(self, model: str, kind: str) -> Catalog:
        """One StoredCatalog per model and kind, made at its first miss and kept (with the
        rows its bisections read first)."""
        place = (self.model_ids[model], kind)
        if place not in self.catalogs_read:
            found = self.ranges.get(place)
            self.catalogs_read[place] = StoredCatalog(self.pages, *found) if found else EMPTY
        return self.catalogs_read[place]

    def examples(self) -> list[tuple[str, str, dict[str, Any]]]:
        """One saved prompt per endpoint kind, for the start-up snippet (a damaged one
        is found at start: a LoadError)."""
        found: dict[str, tuple[str, str, dict[str, Any]]] = {}
        names = {v: k for k, v in self.model_ids.items()}
        for (model_id, kind), (first, last) in sorted(self.ranges.items()):
            if kind not in found:
                try:
                    prompt = StoredCatalog(self.pages, first, last).prompt(0)
                except IndexDamaged as e:
                    raise LoadError(str(self.path), None, e.message) from None
                found[kind] = (BY_KIND[kind].path, names[model_id], orjson.loads(prompt))
        return list(found.values())

    def needs_cursor(self) -> int:
        """Prompts whose n=1 calls get different saved samples one by one
        (`samples.needs_cursor`), counted when the file was built."""
        return int(self.meta.get("cursor_prompts", "0"))


def _check_meta(path: Path, meta: dict[str, str]) -> None:
    """LoadError unless `meta` is that of an index this replay-server reads."""
    if meta.get("format") != FORMAT:
        raise LoadError(str(path), None, "not a replay-server index")
    if meta.get("version") != str(VERSION):
        raise LoadError(str(path), None, f"a version {meta.get('version')} replay-server "
                        f"index, and this replay-server reads version {VERSION}: rebuild "
                        "it from the saved files with `replay-server index`")
    if meta.get("key_version") != str(keys.KEY_VERSION):
        raise LoadError(str(path), None, f"built with key version "
                        f"{meta.get('key_version')}, and this replay-server keys requests "
                        f"with version {keys.KEY_VERSION}: its keys would never match; "
                        "rebuild it from the saved files with `replay-server index`")
