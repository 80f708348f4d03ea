"""The replay index: saved generations by model and key, built from native records.

Shape: model -> key -> Entry -> Instances -> Exchanges -> choices (samples).

- An *exchange* is one saved response (a native record), kept pre-encoded as bytes.
- An *instance* is what one eval instance saved for a prompt: the exchanges that share the
  record's run (`Record.run`: `source.run`, else the file it was read from), `source.file`
  and `source.instance` (records with no instance id, like a recording, form one instance
  per run and key), its samples in saved order. Records of different runs never form one
  instance.
- An *entry* holds every instance saved under one key.

Responses API records are also found by their saved response id (`ModelRun.responses`):
a request's `previous_response_id` is keyed by the conversation that id names, and
`GET /v1/responses/{id}` returns the saved body.

Which saved samples answer a request is decided in `samples.py`; this module only holds
and builds the data. The index is immutable once built; the cursors live with the caller.
Each model also keeps a catalog of its saved prompts for miss diagnostics (`catalog.py`).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadRequest, ModelNotFound, where_of
from ..saved.record import Record
from ..wire.families import family_of
from .catalog import EMPTY, Catalog


class Bodies:
    """Every saved response body of an index, end to end in one buffer.

    A million separately allocated bodies, interleaved with the garbage of parsing them,
    leave the heap fragmented (RSS well above the bytes kept); one growing buffer does
    not. Exchanges keep an offset and a length into it.

    The buffer grows in a BytesIO, whose `getvalue` hands over its own bytes object once
    shrunk to size (a `realloc` in place): the finished buffer is never copied, so the
    bodies are never held twice (a bytearray made into bytes would be, at the peak of
    loading).
    """

    def __init__(self) -> None:
        self.buffer = b""
        self._growing: io.BytesIO | None = io.BytesIO()

    def add(self, body: bytes) -> tuple[int, int]:
        growing = self._growing
        assert growing is not None, "a body added after freeze"
        start = growing.tell()
        growing.write(body)
        return start, len(body)

    def get(self, start: int, size: int) -> bytes:
        if self._growing is not None:  # (not frozen yet: only while an index is built)
            return bytes(self._growing.getbuffer()[start:start + size])
        return self.buffer[start:start + size]

    def freeze(self) -> None:
        """The bytes added, exact-size, in place: no more can be added."""
        if self._growing is not None:
            self.buffer = self._growing.getvalue()
            self._growing = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bodies) and other.buffer == self.buffer

    __hash__ = None  # type: ignore[assignment]


@dataclass(slots=True)
class Exchange:
    """One saved response (a native record), as the index keeps it: where its body lies in
    the index's one `Bodies` buffer (not a bytes object of its own: a million of them would
    fragment the heap), its number of choices, where it was saved, the sampling parameters
    `--strict` compares, and a recorded stream's frames. `start` is its identity: the used
    samples and the checked recordings are remembered by it."""

    bodies: Bodies
    start: int
    size: int
    n: int
    file: Any
    line: Any
    instance: Any
    params: bytes
    sample_usage: tuple[dict[str, Any] | None, ...] | None = None
    # which run it came from: only while building (instances group by it), not compared
    run: Any = field(default=None, compare=False)
    # A recorded stream: (start, size) of its frames, joined, in `bodies`, and whether they
    # carry a usage chunk (chat and completions: the client asked for include_usage).
    stream: tuple[int, int, bool] | None = None
    # The batched completion this prompt was saved from: {"id", "index", "size", "usage"}.
    batch: dict[str, Any] | None = None
    # The `x-replay-source` header value, made on the first answer (not compared).
    source_header: bytes | None = field(default=None, compare=False)

    @property
    def body(self) -> bytes:
        """The saved response body, byte for byte."""
        return self.bodies.get(self.start, self.size)

    @property
    def frames(self) -> bytes | None:
        """A recorded stream's frames as the upstream sent them, or None."""
        if self.stream is None:
            return None
        return self.bodies.get(self.stream[0], self.stream[1])

    @property
    def where(self) -> str:
        return where_of(self.file, self.line, self.instance)


@dataclass(slots=True)
class Instance:
    """What one eval instance saved for a prompt: its exchanges in saved order (its
    samples), or why its saved answer cannot be replayed. A request is answered from one
    instance's samples, never from several mixed: one instance's answer served to another
    is what corrupts scores."""

    where: str
    exchanges: list[Exchange] = field(default_factory=list)
    unusable: str | None = None

    @property
    def size(self) -> int:
        return sum(e.n for e in self.exchanges)

    def samples(self) -> list[tuple[Exchange, int | None]]:
        """Each saved sample in order; `None` stands for a whole one-choice exchange."""
        return [(e, None if e.n == 1 else c) for e in self.exchanges for c in range(e.n)]

    def whole(self) -> list[tuple[Exchange, int | None]]:
        return [(e, None) for e in self.exchanges]


@dataclass(slots=True)
class Entry:
    """Every instance saved under one key: the usable ones apart from the unusable (which
    never block a usable one, and turn a miss into the more precise `replay_unusable`);
    whether every saved sample is the same generation (`uniform`: then any of them answers,
    statelessly, as in the greedy case); the samples by seed, where each has its own.
    `samples.choose` reads it; nothing here decides which sample answers."""

    instances: list[Instance] = field(default_factory=list)
    unusable: list[Instance] = field(default_factory=list)
    uniform: bool = True
    # Set when every usable saved sample carries its own `seed`, all different: seed ->
    # that sample (see samples.py).
    by_seed: dict[int, tuple[Exchange, int | None]] | None = None
    # While building: the instances by (run, source file, source instance), and what tells
    # its family's generations apart (`Family.generations`, for `samples.settle`).
    groups: dict[tuple[Any, Any, Any], Instance] | None = None
    generations: Callable[[dict[str, Any]], list[bytes]] | None = None

    def group(self, identity: tuple[Any, Any, Any], where: str) -> Instance:
        assert self.groups is not None
        found = self.groups.get(identity)
        if found is None:
            found = self.groups[identity] = Instance(where)
            self.instances.append(found)
        return found


@dataclass
class ModelRun:
    """One model's saved prompts. An entry that is one usable one-choice exchange (the
    usual greedy case) is stored as that Exchange, without the Entry and Instance around
    it: at a million records the wrappers would cost more memory than the answers."""

    name: str
    entries: dict[bytes, Entry | Exchange] = field(default_factory=dict)
    records: int = 0
    samples: int = 0
    unusable_records: int = 0
    # Responses API: saved response id -> what a request continuing it puts before its
    # input (`Family.previous_of`, canonical JSON) and the saved exchange; None
    # when two saved conversations share the id.
    responses: dict[str, SavedResponse | None] = field(default_factory=dict)
    # vLLM's tokenizer endpoints, kept apart from the generations (they carry none): a
    # recorded answer's key -> its body; None when recordings answered one key differently.
    tokenizer: dict[bytes, bytes | None] = field(default_factory=dict)
    # The model's context length, when every recorded answer that says one (tokenizer
    # answers, the model's /v1/models entry) says the same.
    max_model_len: int | None = None


@dataclass(slots=True)
class SavedResponse:
    previous: bytes
    exchange: Exchange


# The exchanges (and choices) that answer one prompt, in order; a choice of None stands
# for the whole exchange.
Selection = list[tuple[Exchange, int | None]]


def content_digest(bodies: Bodies, models: dict[str, ModelRun]) -> str:
    """A digest of every saved answer and every model's prompt keys: what a shared state
    needs to tell one run from another of the same names and counts (its prefix)."""
    digest = hashlib.blake2b(bodies.buffer, digest_size=16)
    for name in sorted(models):
        digest.update(name.encode() + b"\0" + b"".join(sorted(models[name].entries)))
    return digest.hexdigest()


class Index:
    """The saved runs a server answers from: model name -> ModelRun, the `--model-alias`
    map, and each model's prompt catalogs (one per endpoint kind). Immutable once built
    (the repeats cursors live with the Replayer), so that one index can serve any number
    of requests at once, and so that `file.StoredIndex`, which leaves the entries and the
    catalogs in the index file, can stand in for it."""

    def __init__(self, models: dict[str, ModelRun], aliases: dict[str, str] | None = None,
                 catalogs: dict[tuple[str, str], Catalog] | None = None):
        self.models = models
        self.aliases = dict(aliases or {})
        self.catalogs = catalogs or {}
        self.bodies: Bodies | None = None  # (the builder's: what `content` digests)
        self._content: str | None = None
        for client, saved in self.aliases.items():
            if saved not in models:
                raise ValueError(f"--model-alias {client}={saved}: no saved run has model "
                                 f"`{saved}` (saved: {', '.join(sorted(models)) or 'none'})")
            if client in models and client != saved:
                raise ValueError(f"--model-alias {client}={saved}: `{client}` is a saved model "
                                 "itself; an alias never shadows a served model's own name")

    @property
    def content(self) -> str:
        """What the saved runs hold (`content_digest`), made the first time it is asked
        (a shared state's shape: two runs of one model and benchmark, two seeds, are told
        apart by it; nothing else pays for it); "" where it is not known."""
        if self._content is None:
            self._content = "" if self.bodies is None else \
                content_digest(self.bodies, self.models)
        return self._content

    def select(self, model: str | None) -> ModelRun:
        """The saved run a request's `model` selects: the model of that name, else the one
        an alias maps it to (`*` maps any other name)."""
        if model is None:
            if len(self.models) == 1:
                return next(iter(self.models.values()))
            raise BadRequest("`model` is required: this server holds several models: "
                             + ", ".join(sorted(self.models)), param="model")
        run = self._named(model)
        if run is None:
            raise ModelNotFound(model, sorted(self.models))
        return run

    def serves(self, model: str) -> bool:
        """Whether a request naming `model` selects a saved run (its own name, or an alias:
        `*` makes every name one), by the rules of `select`."""
        return self._named(model) is not None

    def _named(self, model: str) -> ModelRun | None:
        run = self.models.get(model)
        if run is None:
            run = self.models.get(self.aliases.get(model, self.aliases.get("*", "")))
        return run

    def catalog(self, model: str, kind: str) -> Catalog:
        """The saved prompts of one model and endpoint kind, for miss diagnostics."""
        return self.catalogs.get((model, kind), EMPTY)

    def saved_response(self, model: str, response_id: str) -> SavedResponse | None:
        """The saved Responses answer with this id, for `previous_response_id` and GET, or
        None. Raises ValueError when two different saved conversations share the id."""
        responses = self.models[model].responses
        found = responses.get(response_id)
        if found is None and response_id in responses:
            raise ValueError(f"two different saved conversations have the response id "
                             f"{response_id!r}")
        return found

    def response_models(self, response_id: str) -> list[str]:
        """The models that saved a Responses answer with this id (GET names no model)."""
        return [name for name, run in self.models.items() if response_id in run.responses]


def entry_of(value: Entry | Exchange) -> Entry:
    """The full Entry form of an index value (off the hot path: reports, status)."""
    if isinstance(value, Entry):
        return value
    return Entry([Instance(value.where, [value])])


def prompt_of(record: Record) -> dict[str, Any]:
    """The keyed prompt of a saved record (one prompt: a batch is saved prompt by prompt,
    and `saved.record.make_record` checked its form)."""
    # (Responses: NeedsPrevious if it continues an earlier response)
    found = family_of(record.endpoint).prompts(record.request, None)
    assert found is not None and len(found) == 1
    return found[0]

