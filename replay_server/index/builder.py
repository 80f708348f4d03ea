"""Records in, Index out: the one place saved records become the replay index.

Records are grouped into instances as they arrive (see index.py for the shape). A
prompt's first record is kept as a bare Exchange; the Entry and Instance wrappers are made
only when a second record (or an unusable one) comes for the same prompt: building them for
every record and dropping most at the end would leave the heap full of holes between the
objects that stay. Each new prompt's canonical JSON also goes to the model's prompt
catalog, for miss diagnostics.

A Responses API record that continues an earlier response (`previous_response_id`) is
keyed by the conversation that response holds, so it is added once every record is in
(in saved order, whatever order the files gave the turns in); one whose earlier response
was not saved is unusable, and says so.

A recorded tokenizer exchange (`/tokenize`, ...) is no generation: its answer is kept by
key beside the model's entries (`ModelRun.tokenizer`), never as a sample; it and a
recorded `/v1/models` entry say the model's `max_model_len`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ..errors import BadRequest, LoadError
from ..paths import MODELS_PATH, NO_GENERATION
from ..saved.record import Record
from ..wire import keys, tokenizer
from ..wire.families import family_of
from ..wire.family import Family
from . import heap
from .catalog import Catalog, ListCatalog
from .index import Bodies, Entry, Exchange, Index, ModelRun, SavedResponse, prompt_of
from .samples import settle


class Builder:
    """Saved records in, one Index out: `add` each record as the readers give it (in
    saved order, which is the order of each instance's samples), then `build` once. Every
    way saved records become an index (serve, inspect, index, run) goes through it, so
    that instance identity, the lone-exchange form and the catalog are decided once."""

    def __init__(self) -> None:
        self._models: dict[str, ModelRun] = {}
        self._params: dict[bytes, bytes] = {}
        self._plain_params: dict[tuple[Any, ...], bytes] = {}
        self._bodies = Bodies()
        self._prompts: dict[tuple[str, str], list[tuple[bytes, str]]] = {}
        self._continuing: list[Record] = []
        self._lengths: dict[str, set[int]] = {}  # max_model_len in recorded answers

    def add(self, record: Record) -> None:
        if record.endpoint in NO_GENERATION:
            self._add_no_generation(record)
            return
        if family_of(record.endpoint).previous_id(record.request) is not None:
            self._continuing.append(record)  # keyed once the turn it continues is in
            return
        self._add(record, None)

    def _add_no_generation(self, record: Record) -> None:
        """A recorded tokenizer answer, by its key (answers that differ for one key, two
        tokenizers recorded under one model name, leave it unanswered, never one of
        them), or a model's `/v1/models` entry: what they say of `max_model_len`."""
        key = None
        if record.endpoint != MODELS_PATH:
            try:
                key = tokenizer.key(tokenizer.table_of(record.endpoint, record.request),
                                    record.request)
            except BadRequest as e:
                raise LoadError(record.origin, record.source.get("line"), str(e),
                                field="request") from None
        length = (record.response or {}).get("max_model_len")
        if type(length) is int:
            self._lengths.setdefault(record.model, set()).add(length)
        if key is None:  # a model listed, and no more: it is served only if it has answers
            return
        run = self._models.get(record.model)
        if run is None:
            run = self._models[record.model] = ModelRun(record.model)
        body = orjson.dumps(record.response)
        answers = run.tokenizer
        if key not in answers:
            answers[key] = body
        elif answers[key] != body:
            answers[key] = None

    def _add(self, record: Record, prompt: dict[str, Any] | None) -> None:
        family = family_of(record.endpoint)
        request = record.request
        try:
            if prompt is None:
                prompt = prompt_of(record)
            canonicals = [keys.canonical(prompt)]
            if record.also:
                canonicals += [keys.canonical(_keyed(family, form)) for form in record.also]
            params = self._sampling_params(request, family)
        except (RecursionError, keys.Unkeyable) as e:
            raise LoadError(record.origin, record.source.get("line"), "the saved request "
                            f"nests too deeply to be keyed: {e}", field="request") from None
        run = self._models.get(record.model)
        if run is None:
            run = self._models[record.model] = ModelRun(record.model)
        run.records += 1
        source = record.source
        file, line, instance = source.get("file"), source.get("line"), source.get("instance")
        identity = (record.run, file, instance)
        response = record.response
        if record.unusable is not None or response is None:
            run.unusable_records += 1
            reason = f"{record.unusable} (saved at {record.where})"
            for canonical in canonicals:
                self._place(run, family, canonical, identity, record.where, unusable=reason)
            return
        usage = tuple(record.sample_usage) if record.sample_usage is not None else None
        start, size = self._bodies.add(orjson.dumps(response))
        n = family.samples(response)
        stream = self._stream(record, family) if record.stream is not None else None
        exchange = Exchange(self._bodies, start, size, n, file, line, instance, params, usage,
                            identity[0], stream, record.batch)
        if family.chained:
            self._register(run, record, prompt, exchange)
        run.samples += n
        for canonical in canonicals:  # one exchange under each form of the request
            self._place(run, family, canonical, identity, exchange.where, exchange=exchange)

    def _place(self, run: ModelRun, family: Family, canonical: bytes,
               identity: tuple[Any, ...], where: str, exchange: Exchange | None = None,
               unusable: str | None = None) -> None:
        """Put a saved exchange (or an unusable record) under one key."""
        key = keys.digest(canonical)
        current = run.entries.get(key)
        if current is None:
            # the catalog keeps an exact-size copy (orjson's result holds spare room)
            self._prompts.setdefault((run.name, family.kind), []).append(
                (memoryview(canonical).tobytes(), where))
        if exchange is None:
            group = self._entry(run, key, current, family).group(identity, where)
            if group.unusable is None:
                group.unusable = unusable
        elif current is None and exchange.n == 1:
            run.entries[key] = exchange
        else:
            self._entry(run, key, current, family).group(identity, where).exchanges.append(
                exchange)

    def _sampling_params(self, request: dict[str, Any], family: Family) -> bytes:
        """What `--strict` compares of a saved request (`Table.params`, canonical JSON),
        one bytes object for all the requests that set the same values: computed once for
        each set of plain values (most records of a run share theirs; a run whose records
        all differ, by a seed say, remembers only its first sets)."""
        # with each value's type: 1, 1.0 and true are equal in Python, not in JSON; the
        # prompt is never a sampling parameter (it is keyed), and a request's only
        # list-valued field, usually
        prompt = family.prompt_field
        plain = (family.kind, *[(k, type(v), v) for k, v in request.items() if k != prompt])
        try:
            found, hashable = self._plain_params.get(plain), True
        except TypeError:  # a list or object value: not remembered
            found, hashable = None, False
        if found is not None:
            return found
        params = family.table.params(request)
        params = self._params.setdefault(params, params)
        if hashable and len(self._plain_params) < _REMEMBERED and all(
                t in _PLAIN for _, t, _ in plain[1:]):
            self._plain_params[plain] = params
        return params

    def _stream(self, record: Record, family: Family) -> tuple[int, int, bool] | None:
        if record.stream is None:
            return None
        start, size = self._bodies.add("".join(record.stream).encode())
        return start, size, family.carries_usage(record.stream)

    @staticmethod
    def _register(run: ModelRun, record: Record, prompt: dict[str, Any],
                  exchange: Exchange) -> None:
        """Make a saved Responses answer findable by its id, as the server that sent it
        kept it (unless the request said `store: false`)."""
        assert record.response is not None
        response_id = record.response.get("id")
        if not isinstance(response_id, str) or record.request.get("store") is False:
            return
        previous_of = family_of(record.endpoint).previous_of
        assert previous_of is not None
        previous = keys.canonical(previous_of(prompt, record.response))
        if response_id not in run.responses:
            run.responses[response_id] = SavedResponse(previous, exchange)
            return
        saved = run.responses[response_id]
        if saved is not None and saved.previous != previous:
            run.responses[response_id] = None  # two conversations under one id: ambiguous

    def _add_continuing(self) -> None:
        """The records that continue an earlier response, in saved order, each keyed once
        the response it continues is in (a chain is resolved turn by turn)."""
        pending, self._continuing = self._continuing, []
        while pending:
            left = []
            for record in pending:
                run = self._models.get(record.model)
                saved = run.responses.get(_previous_id(record)) if run is not None else None
                if saved is None:
                    left.append(record)
                    continue
                self._add(record, _keyed(family_of(record.endpoint), record.request,
                                         orjson.loads(saved.previous)))
            if len(left) == len(pending):
                break
            pending = left
        for record in pending:
            response_id = _previous_id(record)
            run = self._models.get(record.model)
            shared = run is not None and response_id in run.responses
            record.unusable = f"continues response {response_id!r}, " + (
                "whose id two different saved conversations share" if shared else
                "which was not saved (or was saved with `store: false`)")
            self._add(record, _keyed(family_of(record.endpoint), record.request,
                                     {"unresolved": response_id}))

    @staticmethod
    def _entry(run: ModelRun, key: bytes, current: Entry | Exchange | None, family: Family
               ) -> Entry:
        """The Entry for a prompt, made from its lone Exchange (or from nothing) if need be
        (a key is one family's: its kind is keyed)."""
        if isinstance(current, Entry):
            return current
        entry = Entry(groups={}, generations=family.generations)
        if current is not None:
            identity = (current.run, current.file, current.instance)
            entry.group(identity, current.where).exchanges.append(current)
        run.entries[key] = entry
        return entry

    def build(self, aliases: dict[str, str] | None = None) -> Index:
        """The index of every record added, with a prompt catalog per model and kind."""
        self._add_continuing()
        catalogs: dict[tuple[str, str], Catalog] = {
            place: ListCatalog(saved) for place, saved in self._prompts.items()}
        self._prompts = {}
        # Loading freed far more than it keeps (the parsed records), between objects that
        # stay: that memory goes back to the system.
        heap.trim()
        self._bodies.freeze()
        for run in self._models.values():
            lengths = self._lengths.get(run.name, set())
            run.max_model_len = next(iter(lengths)) if len(lengths) == 1 else None
            for key, value in run.entries.items():
                if isinstance(value, Entry):
                    run.entries[key] = settle(value)
        index = Index(self._models, aliases, catalogs)
        index.bodies = self._bodies
        return index


_PLAIN = frozenset({str, int, float, bool, type(None)})
_REMEMBERED = 4096


def _previous_id(record: Record) -> str:
    found = family_of(record.endpoint).previous_id(record.request)
    assert found is not None
    return found


def _keyed(family: Family, request: dict[str, Any], previous: dict[str, Any] | None = None
           ) -> dict[str, Any]:
    """The keyed prompt of a saved request (one prompt: `saved.record.make_record` checked
    its form), or of another form of one (`Record.also`)."""
    found = family.prompts(request, previous)
    assert found is not None and len(found) == 1
    return found[0]


def build(records: Iterable[Record], aliases: dict[str, str] | None = None) -> Index:
    builder = Builder()
    for record in records:
        builder.add(record)
    return builder.build(aliases)
