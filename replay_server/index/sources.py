"""What an index file was built from, and whether that changed since: an index is served
only while it is what a load of its saved files would give.

An index file keeps, by absolute path (never relative to the folder `index` ran in, so
that the answers below are the same from any folder): the arguments it was built from,
each saved file with its size and mtime before it was read (and those of the files of its
directories that no reader claimed), each directory argument's files as walked, and every
directory walked; and each saved file's identity (`identity`: its size, its mtime in
nanoseconds and a digest of its whole content, the one test of "the same file" that the
index cache keys its entries by too). From them:
- `Sources.stale` is the one staleness check: a saved file changed (size or mtime: a
  touched file counts; or, size and mtime the same, its content: they can be copied, by
  `cp -p`, `touch -r` or rsync), a directory lost one, or holds one that a load would now
  read and did not then (added since, or no saved run then: a recording begun empty).
  `Sources.refuse_stale` turns it into a LoadError that names them and gives the command
  that rebuilds the index: serving it would answer with what the files held then, and a
  stale answer served quietly is the worst a replay can do;
- `Sources.inputs`: the index and everything it was built from, as inputs that no output
  of a command may replace (`Plan.refuse_output`), as when the saved files are served.
An index none of whose saved files is here (copied to another machine) cannot be checked:
`Sources.missing`, said at start; one of them gone while another is here is a change.

Objects (`saved/objects.py`) are kept by URL, with their size and identity, and each URL
argument's listing: `Sources.stale` lists them again (a listing, nothing is fetched) and
counts an object changed, gone or new under a prefix as a change; when they cannot be
listed (no network, no credentials here), `Sources.unchecked` says so at start, as for
missing files.
"""

from __future__ import annotations

import mmap
import os
import shlex
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson
import xxhash

from ..errors import LoadError, shown_file
from ..saved import objects
from ..saved.loader import Plan, absolute, claimed, listing


def digest(path: Path) -> str:
    """xxh3-128 of the whole file, read through a memory map (no copy): some 0.25 s for
    3 GB in the page cache (sha256 is 6-7x slower, and nobody picks saved files to collide
    with themselves: no cryptographic strength is needed; docs/performance.md)."""
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return xxhash.xxh3_128_hexdigest(b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return xxhash.xxh3_128_hexdigest(mapped)


def identity(path: Path) -> list[Any]:
    """A saved file's identity: its size, its mtime in nanoseconds (taken before the
    digest: a change during it shows the next time) and the digest of its content."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, digest(path)]


def record(plan: Plan) -> dict[str, str]:
    """The index file's `meta` rows that say what it was built from: each read file's
    size and mtime as they were before the load (one changed during it is found
    changed), and the digest of its content now."""
    def text(value: Any) -> str:
        return orjson.dumps(value).decode()

    read = [p for _, p in plan.files]
    kept = set(read) | set(plan.objects)
    return {"inputs": text([plan.urls.get(p, str(p)) for p in plan.arguments]),
            "sources": text([plan.objects[p].record() if p in plan.objects else
                             {"file": str(absolute(p)), "size": plan.stamps[p][0],
                              "mtime_ns": plan.stamps[p][1], "digest": digest(p)}
                             for p in read]),
            "unread": text({str(absolute(p)): stamp for p, stamp in plan.stamps.items()
                            if p not in kept}),
            "objects": text({url: [o.record() for o in listed]
                             for url, listed in plan.listings.items()}),
            "folders": text({str(k): [str(p) for p in v] for k, v in plan.listed.items()}),
            "walked": text(sorted(str(f) for f in plan.folders))}


def _stamp(path: Path) -> list[int] | None:
    """A file's size and mtime in nanoseconds (None: it cannot be read)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _changed(source: dict[str, Any], stamp: list[int]) -> bool:
    """Whether a saved file whose size and mtime are now `stamp` is not the one the index
    was built from (`identity`'s test): its content digested only when they are the same."""
    if stamp != [source["size"], source["mtime_ns"]]:
        return True
    try:
        return bool(digest(Path(source["file"])) != source["digest"])
    except OSError:
        return True


class Sources:
    """What the index file `path` was built from, as its `meta` rows say."""

    def __init__(self, path: Path, meta: Mapping[str, str]) -> None:
        self.path = path
        self.arguments: list[str] = orjson.loads(meta.get("inputs", "[]"))
        sources: list[dict[str, Any]] = orjson.loads(meta.get("sources", "[]"))
        self.files = [s for s in sources if "file" in s]  # (the others are objects)
        # each URL argument's objects as listed then: {url: [{url, size, identity}]}
        self.objects: dict[str, list[dict[str, Any]]] = orjson.loads(meta.get("objects",
                                                                               "{}"))
        self.folders: dict[str, list[str]] = orjson.loads(meta.get("folders", "{}"))
        self.walked: list[str] = orjson.loads(meta.get("walked", "[]"))
        # the files of its directories that no reader claimed, with their size and mtime
        self.unread: dict[str, list[int]] = orjson.loads(meta.get("unread", "{}"))

    def stale(self) -> list[str]:
        """What changed since the index was built, each `FILE (changed)`, `FILE (gone)`
        (from a directory it read that is still here, or while another of its saved files
        is here: only an index none of whose files are here is served without them) or
        `FILE (new)`: in such a
        directory, a file that a load would read now, and did not then (one added, or one
        no reader claimed then that changed since: a recording begun empty)."""
        stale: dict[str, None] = {}  # (in order, each once)
        stamps = {s["file"]: _stamp(Path(s["file"])) for s in self.files}
        here = any(stamp is not None for stamp in stamps.values())
        for source in self.files:
            stamp = stamps[source["file"]]
            if stamp is None and here:  # (none here at all: `missing`)
                stale[f"{source['file']} (gone)"] = None
            elif stamp is not None and _changed(source, stamp):
                stale[f"{source['file']} (changed)"] = None
        for folder, files in self.folders.items():
            if not os.path.isdir(folder):
                continue
            now = {str(p): p for p in listing(Path(folder))}
            stale.update((f"{f} (gone)", None) for f in files if f in stamps and f not in now)
            stale.update((f"{f} (new)", None) for f, p in now.items() if f not in stamps
                         and _stamp(p) != self.unread.get(f) and claimed(p))
        return [*stale, *self._objects_stale()]

    @cached_property
    def _listed(self) -> tuple[dict[str, dict[str, Any]], str | None]:
        """Each object under the URL arguments now (a listing: nothing is fetched), by
        URL; or why they cannot be listed here."""
        now: dict[str, dict[str, Any]] = {}
        for url in self.objects:
            try:
                now.update((o.url, o.record()) for _, _, o in objects.listing(url).objects)
            except LoadError as error:
                return {}, str(error)
        return now, None

    def _objects_stale(self) -> list[str]:
        """`URL (changed)`, `URL (gone)`, `URL (new)` of the objects the index read."""
        now, why = self._listed if self.objects else ({}, None)
        if why is not None:
            return []
        then = {o["url"]: o for listed in self.objects.values() for o in listed}
        return [*(f"{u} (gone)" if u not in now else f"{u} (changed)" for u, o in
                  then.items() if now.get(u) != o and o["identity"] is not None),
                *(f"{u} (new)" for u in now if u not in then)]

    def unchecked(self) -> str | None:
        """Why the objects the index was built from cannot be checked for a change: they
        cannot be listed here, or their store gives no identity (None: all checked)."""
        if not self.objects:
            return None
        why = self._listed[1]
        if why is not None:
            return f"the objects it was built from cannot be listed here ({why})"
        blind = [o["url"] for listed in self.objects.values() for o in listed
                 if o["identity"] is None]
        if blind:
            return (f"{len(blind)} object(s) it was built from (e.g. {blind[0]}) have no "
                    "identity (no ETag, version or time) in their store")
        return None

    def missing(self) -> list[str]:
        """The saved files it was built from that are not here, nor their directory."""
        folders = [f + os.sep for f in self.folders if os.path.isdir(f)]
        return [s["file"] for s in self.files if not os.path.exists(s["file"])
                and not any(s["file"].startswith(f) for f in folders)]

    def refuse_stale(self) -> None:
        """LoadError if the index is stale (`stale`), naming what changed and giving the
        command that rebuilds it."""
        stale = self.stale()
        if not stale:
            return
        shown = "; ".join(stale[:5]) + (f"; and {len(stale) - 5} more" if len(stale) > 5
                                         else "")
        name = shown_file(str(absolute(self.path)))
        out = shlex.quote(str(absolute(self.path)) if name == str(absolute(self.path))
                          else Path(name).name)  # fetched: written here, uploaded again
        raise LoadError(str(self.path), None, f"the saved files it was built from changed "
                        f"since: {shown}. It would serve what they held then: rebuild it "
                        f"with `replay-server index {shlex.join(self.arguments)} -o {out}` "
                        "(with the options it was built with), or serve the saved files "
                        "themselves")

    def inputs(self) -> Plan:
        """The index file and what it was built from, as inputs no output may replace:
        its saved files, and anything in a directory it read."""
        inputs = Plan()
        for path in [self.path, *(Path(s["file"]) for s in self.files)]:
            inputs.keep(path)
        inputs.folders.update(Path(f) for f in self.walked)
        return inputs
