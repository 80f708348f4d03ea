"""Records in, Index out: the one place saved records become the replay index.

Records are grouped into instances as they arrive (see index.py for the shape). A
prompt's first record is kept as a bare Exchange; the Entry and Instance wrappers are made
only when a second record (or an unusable one) comes for the same prompt: building them for
every record and dropping most at the end would leave the heap full of holes between the
objects that stay. Each new prompt's canonical JSON also goes to the model's prompt
catalog, for miss diagnostics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from . import keys
from .errors import LoadError
from .index import Bodies, Entry, Exchange, Index, ModelRun, kind_of
from .nearest import Catalog, PromptCatalog
from .records import Record
from .samples import settle


class Builder:

    def __init__(self) -> None:
        self._models: dict[str, ModelRun] = {}
        self._params: dict[bytes, bytes] = {}
        self._bodies = Bodies()
        self._prompts: dict[tuple[str, str], list[tuple[bytes, str]]] = {}

    def add(self, record: Record) -> None:
        kind = kind_of(record.endpoint)
        canonicals = [self._canonical(record, request)
                      for request in [record.request, *(record.also or ())]]
        run = self._models.get(record.model)
        if run is None:
            run = self._models[record.model] = ModelRun(record.model)
        run.records += 1
        source = record.source
        file, line, instance = source.get("file"), source.get("line"), source.get("instance")
        identity = (record.run, file, instance)
        if record.unusable is not None or record.response is None:
            run.unusable_records += 1
            reason = f"{record.unusable} (saved at {record.where})"
            for canonical in canonicals:
                self._place(run, kind, canonical, identity, record.where, unusable=reason)
            return
        params = keys.canonical(keys.sampling_params(record.request, kind))
        params = self._params.setdefault(params, params)
        usage = tuple(record.sample_usage) if record.sample_usage is not None else None
        start, size = self._bodies.add(orjson.dumps(record.response))
        n = len(record.response["choices"])
        exchange = Exchange(self._bodies, start, size, n, file, line, instance, params, usage,
                            record.run)
        run.samples += n
        for canonical in canonicals:  # one exchange under each form of the request
            self._place(run, kind, canonical, identity, exchange.where, exchange=exchange)

    @staticmethod
    def _canonical(record: Record, request: dict[str, Any]) -> bytes:
        try:
            found = keys.prompts(kind_of(record.endpoint), request)
            assert found is not None and len(found) == 1  # records.validate checked it
            return keys.canonical(found[0])
        except (RecursionError, keys.Unkeyable) as e:
            raise LoadError(record.origin, record.source.get("line"), "the saved request "
                            f"nests too deeply to be keyed: {e}", field="request") from None

    def _place(self, run: ModelRun, kind: str, canonical: bytes, identity: tuple[Any, ...],
               where: str, exchange: Exchange | None = None, unusable: str | None = None
               ) -> None:
        """Put a saved exchange (or an unusable record) under one key."""
        key = keys.digest(canonical)
        current = run.entries.get(key)
        if current is None:
            # the catalog keeps an exact-size copy (orjson's result holds spare room)
            self._prompts.setdefault((run.name, kind), []).append(
                (memoryview(canonical).tobytes(), where))
        if exchange is None:
            group = self._entry(run, key, current).group(identity, where)
            if group.unusable is None:
                group.unusable = unusable
        elif current is None and exchange.n == 1:
            run.entries[key] = exchange
        else:
            self._entry(run, key, current).group(identity, where).exchanges.append(exchange)

    @staticmethod
    def _entry(run: ModelRun, key: bytes, current: Entry | Exchange | None) -> Entry:
        """The Entry for a prompt, made from its lone Exchange (or from nothing) if need be."""
        if isinstance(current, Entry):
            return current
        entry = Entry(groups={})
        if current is not None:
            identity = (current.run, current.file, current.instance)
            entry.group(identity, current.where).exchanges.append(current)
        run.entries[key] = entry
        return entry

    def build(self, aliases: dict[str, str] | None = None) -> Index:
        self._bodies.freeze()
        for run in self._models.values():
            for key, value in run.entries.items():
                if isinstance(value, Entry):
                    run.entries[key] = settle(value)
        catalogs: dict[tuple[str, str], PromptCatalog] = {
            place: Catalog.build(saved) for place, saved in self._prompts.items()}
        self._prompts = {}
        return Index(self._models, aliases, catalogs)


def build(records: Iterable[Record], aliases: dict[str, str] | None = None) -> Index:
    builder = Builder()
    for record in records:
        builder.add(record)
    return builder.build(aliases)
