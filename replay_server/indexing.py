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

import orjson

from . import keys
from .errors import LoadError
from .index import Bodies, Entry, Exchange, Index, ModelRun, kind_of, prompt_of
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
        try:
            canonical = keys.canonical(prompt_of(record))
        except (RecursionError, keys.Unkeyable) as e:
            raise LoadError(record.origin, record.source.get("line"), "the saved request "
                            f"nests too deeply to be keyed: {e}", field="request") from None
        key = keys.digest(canonical)
        run = self._models.get(record.model)
        if run is None:
            run = self._models[record.model] = ModelRun(record.model)
        run.records += 1
        source = record.source
        file, line, instance = source.get("file"), source.get("line"), source.get("instance")
        identity = (record.run, file, instance)
        current = run.entries.get(key)
        if current is None:
            # the catalog keeps an exact-size copy (orjson's result holds spare room)
            self._prompts.setdefault((run.name, kind), []).append(
                (memoryview(canonical).tobytes(), record.where))
        if record.unusable is not None or record.response is None:
            run.unusable_records += 1
            where = record.where
            group = self._entry(run, key, current).group(identity, where)
            if group.unusable is None:
                group.unusable = f"{record.unusable} (saved at {where})"
            return
        params = keys.canonical(keys.sampling_params(record.request, kind))
        params = self._params.setdefault(params, params)
        usage = tuple(record.sample_usage) if record.sample_usage is not None else None
        start, size = self._bodies.add(orjson.dumps(record.response))
        n = len(record.response["choices"])
        exchange = Exchange(self._bodies, start, size, n, file, line, instance, params, usage,
                            record.run)
        run.samples += n
        if current is None and n == 1:
            run.entries[key] = exchange
        else:
            self._entry(run, key, current).group(identity, exchange.where) \
                .exchanges.append(exchange)

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
