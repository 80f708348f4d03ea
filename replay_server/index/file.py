"""The compact on-disk index: a saved run compiled once into one SQLite file.

`replay-server index PATHS -o RUN.idx` reads the saved files exactly as `serve` does and
writes what the server needs; `serve RUN.idx` then starts in well under a second whatever
the run's size, keeps little in memory, and several worker processes share one copy
(pages are read through a shared, read-only memory map).

    meta(name, value)              format, version, key version, what it was built from
                                   (`sources.record`), the recorded tokenizer answers
                                   (`tokenizer`, JSON)
    models(id, name, records, samples, unusable_records, prompts)
    entries(k BLOB PRIMARY KEY, v)  k = model id (2 bytes) + key; v = one encoded entry
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

An entry is encoded as a 4-byte header length, the header (JSON: the Entry's shape, each
exchange without its body), then the exchanges' bodies end to end, in header order, each
followed by its recorded stream's frames when it has some.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import LoadError
from ..saved.writer import written_whole
from ..wire import keys
from ..wire.families import BY_KIND
from . import sources
from .catalog import EMPTY, Catalog
from .index import Bodies, Entry, Exchange, Index, Instance, ModelRun, SavedResponse
from .loading import Loaded
from .samples import needs_cursor, seeds

FORMAT = "replay-server index"
VERSION = 4
SQLITE_MAGIC = b"SQLite format 3\x00"
MMAP_BYTES = 1 << 40


class OneBody(Bodies):
    """The body (and recorded frames) of one exchange read from the index: `start` is its
    identity, not an offset, so that an exchange keeps one identity however often it is
    read; the frames are asked for at the start -1."""

    def __init__(self, body: bytes, frames: bytes | None = None) -> None:
        self.body = body
        self.frames = frames

    def get(self, start: int, size: int) -> bytes:
        if start == -1:
            assert self.frames is not None
            return self.frames
        return self.body


def _exchange_head(e: Exchange) -> list[Any]:
    usage = list(e.sample_usage) if e.sample_usage is not None else None
    stream = [e.stream[1], e.stream[2]] if e.stream is not None else None
    return [e.start, e.size, e.n, e.file, e.line, e.instance, e.params.decode(), usage,
            stream, e.batch]


def _instance_head(i: Instance) -> list[Any]:
    return [i.where, i.unusable, [_exchange_head(e) for e in i.exchanges]]


def encode(value: Entry | Exchange) -> bytes:
    if isinstance(value, Exchange):
        head: list[Any] = ["x", _exchange_head(value)]
        exchanges = [value]
    else:
        head = ["e", value.uniform, [_instance_head(i) for i in value.instances],
                [_instance_head(i) for i in value.unusable], value.by_seed is not None]
        exchanges = [e for i in value.instances + value.unusable for e in i.exchanges]
    header = orjson.dumps(head)
    parts = [len(header).to_bytes(4, "little"), header]
    for e in exchanges:
        parts.append(e.body)
        if e.stream is not None:
            parts.append(e.bodies.get(e.stream[0], e.stream[1]))
    return b"".join(parts)  # (one copy of each body)


def decode(data: bytes) -> Entry | Exchange:
    size = int.from_bytes(data[:4], "little")
    head = orjson.loads(data[4:4 + size])
    at = 4 + size

    def exchange(h: list[Any]) -> Exchange:
        nonlocal at
        body = data[at:at + h[1]]
        at += h[1]
        usage = tuple(h[7]) if h[7] is not None else None
        stream, frames = None, None
        if h[8] is not None:
            frames = data[at:at + h[8][0]]
            at += h[8][0]
            stream = (-1, h[8][0], bool(h[8][1]))
        return Exchange(OneBody(body, frames), h[0], h[1], h[2], h[3], h[4], h[5],
                        h[6].encode(), usage, None, stream, h[9])

    def instance(h: list[Any]) -> Instance:
        return Instance(h[0], [exchange(e) for e in h[2]], h[1])

    if head[0] == "x":
        return exchange(head[1])
    entry = Entry([instance(i) for i in head[2]], [instance(i) for i in head[3]], head[1])
    if head[4]:
        entry.by_seed = seeds(entry.instances)
    return entry


def is_index(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


_SCHEMA = """
CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT);
CREATE TABLE models(id INTEGER PRIMARY KEY, name TEXT UNIQUE, records INTEGER,
                    samples INTEGER, unusable_records INTEGER, prompts INTEGER);
CREATE TABLE entries(k BLOB PRIMARY KEY, v BLOB);
CREATE TABLE prompts(id INTEGER PRIMARY KEY, model_id INTEGER, kind TEXT, prompt BLOB,
                     place TEXT);
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


def write(loaded: Loaded, out: Path) -> int:
    """Compile a loaded run into `out` (written beside it, then renamed); returns the
    number of prompts."""
    loaded.plan.refuse_output(out)
    with written_whole(out) as tmp:
        db = sqlite3.connect(tmp)
        db.executescript(_WRITING + _SCHEMA)
        model_ids = {name: i for i, name in enumerate(sorted(loaded.index.models), start=1)}
        _write_entries(db, loaded.index, model_ids)
        _write_prompts(db, loaded, model_ids)
        cursors = sum(1 for run in loaded.index.models.values() for v in run.entries.values()
                      if needs_cursor(v))
        meta = {"format": FORMAT, "version": str(VERSION), "key_version": str(keys.KEY_VERSION),
                "built": str(time.time()), **sources.record(loaded.plan),
                "cursor_prompts": str(cursors), "tokenizer": _tokenizer_meta(loaded.index)}
        db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        db.commit()
        db.close()
    return sum(len(run.entries) for run in loaded.index.models.values())


def _write_entries(db: sqlite3.Connection, index: Index, ids: dict[str, int]) -> None:
    for name, run in index.models.items():
        db.execute("INSERT INTO models VALUES (?, ?, ?, ?, ?, ?)",
                   (ids[name], name, run.records, run.samples, run.unusable_records,
                    len(run.entries)))
        prefix = ids[name].to_bytes(2, "big")
        rows = ((prefix + key, encode(run.entries[key])) for key in sorted(run.entries))
        db.executemany("INSERT INTO entries VALUES (?, ?)", rows)
        db.executemany("INSERT INTO responses VALUES (?, ?, ?)", (
            (prefix + rid.encode(), None if saved is None else saved.previous,
             None if saved is None else encode(saved.exchange))
            for rid, saved in run.responses.items()))


def _tokenizer_meta(index: Index) -> str:
    """The recorded tokenizer answers, per model (few and small beside the generations:
    kept whole in `meta`, read into memory when the file is opened)."""
    return orjson.dumps({
        name: {"max_model_len": run.max_model_len,
               "answers": {key.hex(): None if body is None else body.decode()
                           for key, body in run.tokenizer.items()}}
        for name, run in index.models.items()
        if run.tokenizer or run.max_model_len is not None}).decode()


def _write_prompts(db: sqlite3.Connection, loaded: Loaded, ids: dict[str, int]) -> None:
    """Every saved prompt, from the catalogs built with the index (already sorted)."""
    for (name, kind), catalog in sorted(loaded.index.catalogs.items()):
        first = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM prompts").fetchone()[0]
        db.executemany("INSERT INTO prompts(model_id, kind, prompt, place) VALUES (?, ?, ?, ?)",
                       ((ids[name], kind, p, w) for p, w in catalog.items()))
        db.execute("INSERT INTO prompt_ranges VALUES (?, ?, ?, ?)",
                   (ids[name], kind, first, first + len(catalog) - 1))


class StoredEntries:
    """The entries of one model, looked up in the index file (a read-only mapping)."""

    def __init__(self, db: sqlite3.Connection, model_id: int, count: int) -> None:
        self.db = db
        self.prefix = model_id.to_bytes(2, "big")
        self.count = count

    def get(self, key: bytes) -> Entry | Exchange | None:
        row = self.db.execute("SELECT v FROM entries WHERE k = ?", (self.prefix + key,)
                              ).fetchone()
        return decode(row[0]) if row is not None else None

    def __len__(self) -> int:
        return self.count

    def items(self) -> Iterator[tuple[bytes, Entry | Exchange]]:
        low, high = self.prefix, (int.from_bytes(self.prefix, "big") + 1).to_bytes(2, "big")
        for k, v in self.db.execute("SELECT k, v FROM entries WHERE k >= ? AND k < ? "
                                    "ORDER BY k", (low, high)):
            yield k[2:], decode(v)

    def values(self) -> Iterator[Entry | Exchange]:
        return (v for _, v in self.items())


class StoredCatalog(Catalog):
    """The catalog of one model and kind in the index file: rows `first`..`last` of the
    `prompts` table, written in catalog order, read by position as the bisection asks."""

    def __init__(self, db: sqlite3.Connection, first: int, last: int) -> None:
        self.db, self.first, self.last = db, first, last

    def __len__(self) -> int:
        return self.last - self.first + 1

    def prompt(self, i: int) -> bytes:
        row = self.db.execute("SELECT prompt FROM prompts WHERE id = ?", (self.first + i,)
                              ).fetchone()
        return bytes(row[0])

    def where(self, i: int) -> str:
        row = self.db.execute("SELECT place FROM prompts WHERE id = ?", (self.first + i,)
                              ).fetchone()
        return str(row[0])


class StoredIndex(Index):
    """An Index whose entries and prompt catalog stay in the index file."""

    def __init__(self, path: Path, aliases: dict[str, str] | None = None) -> None:
        uri = f"file:{path.resolve()}?mode=ro&immutable=1"
        try:
            db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            db.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            meta = dict(db.execute("SELECT name, value FROM meta").fetchall())
            model_rows = db.execute("SELECT id, name, records, samples, unusable_records, "
                                    "prompts FROM models").fetchall()
        except sqlite3.DatabaseError as e:
            raise LoadError(str(path), None, f"not a replay-server index: {e}") from None
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
        self.path, self.db, self.meta = path, db, meta
        self.sources = sources.Sources(path, meta)
        models: dict[str, ModelRun] = {}
        for model_id, name, records, samples, unusable, prompts in model_rows:
            run = ModelRun(name, records=records, samples=samples, unusable_records=unusable)
            run.entries = StoredEntries(db, model_id, prompts)  # type: ignore[assignment]
            models[name] = run
        for name, saved in orjson.loads(meta.get("tokenizer", "{}")).items():
            models[name].max_model_len = saved["max_model_len"]
            models[name].tokenizer = {bytes.fromhex(k): None if v is None else v.encode()
                                      for k, v in saved["answers"].items()}
        self.model_ids = {name: model_id for model_id, name, *_ in model_rows}
        super().__init__(models, aliases)

    def saved_response(self, model: str, response_id: str) -> SavedResponse | None:
        row = self.db.execute("SELECT previous, v FROM responses WHERE k = ?", (
            self.model_ids[model].to_bytes(2, "big") + response_id.encode(),)).fetchone()
        if row is None:
            return None
        if row[0] is None:
            raise ValueError(f"two different saved conversations have the response id "
                             f"{response_id!r}")
        exchange = decode(row[1])
        assert isinstance(exchange, Exchange)
        return SavedResponse(bytes(row[0]), exchange)

    def response_models(self, response_id: str) -> list[str]:
        keys_ = [(model_id.to_bytes(2, "big") + response_id.encode(),)
                 for model_id in self.model_ids.values()]
        names = {v: k for k, v in self.model_ids.items()}
        return [names[int.from_bytes(bytes(k)[:2], "big")] for (k,) in keys_
                if self.db.execute("SELECT 1 FROM responses WHERE k = ?", (k,)).fetchone()]

    def catalog(self, model: str, kind: str) -> Catalog:
        row = self.db.execute("SELECT first, last FROM prompt_ranges WHERE model_id = ? "
                              "AND kind = ?", (self.model_ids[model], kind)).fetchone()
        return StoredCatalog(self.db, row[0], row[1]) if row else EMPTY

    def examples(self) -> list[tuple[str, str, dict[str, Any]]]:
        """One saved prompt per endpoint kind, for the start-up snippet."""
        found: list[tuple[str, str, dict[str, Any]]] = []
        names = {v: k for k, v in self.model_ids.items()}
        for model_id, kind, first in self.db.execute(
                "SELECT model_id, kind, first FROM prompt_ranges ORDER BY model_id, kind"):
            if kind not in {k for _, k, _ in found}:
                prompt = orjson.loads(self.db.execute("SELECT prompt FROM prompts WHERE id = ?",
                                                      (first,)).fetchone()[0])
                found.append((names[model_id], kind, prompt))
        return [(BY_KIND[kind].path, model, prompt) for model, kind, prompt in found]

    def needs_cursor(self) -> int:
        """Prompts whose n=1 calls get different saved samples one by one
        (`samples.needs_cursor`), counted when the file was built."""
        return int(self.meta.get("cursor_prompts", "0"))
