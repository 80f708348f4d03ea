"""The replay index: saved generations by model and key, and the rules that pick an answer.

Shape: model -> key -> Entry -> Instances -> Exchanges -> choices (samples).

- An *exchange* is one saved response (a native record), kept pre-encoded as bytes.
- An *instance* is what one eval instance saved for a prompt: the exchanges that share the
  record's source file and `source.instance` (records with no instance id, like a
  recording, form one instance per file and key), its samples in saved order.
- An *entry* holds every instance saved under one key.

The rules (DESIGN.md, "Repeats and samples"), applied by `choose`:
1. No usable instance: `replay_unusable` if some instance was saved unusable, else a miss.
2. Strict mode: only instances whose saved sampling parameters equal the request's.
3. Every saved sample is one generation ("uniform", the greedy case): `n=1` gets it, any
   number of times; `n=k` gets an instance that saved exactly k samples.
4. Instances that saved different generations: `replay_ambiguous`, unless the user
   allowed serving them in saved order.
5. `n` equal to an instance's saved count: that instance, whole, any number of times.
   `n=1` against several samples: the samples in saved order, one per call (the per-key
   cursor, the only state), then `replay_exhausted`. Anything else: `replay_n_mismatch`.

The index itself is immutable once built; the cursors live with the caller.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import keys
from .errors import (
    Ambiguous,
    BadRequest,
    Exhausted,
    ModelNotFound,
    NMismatch,
    ParamsMismatch,
    Unusable,
)
from .nearest import PromptCatalog
from .records import CHAT_PATH, Record, where_of


class Bodies:
    """Every saved response body of an index, end to end in one buffer.

    A million separately allocated bodies, interleaved with the garbage of parsing them,
    leave the heap fragmented (RSS well above the bytes kept); one growing buffer does
    not. Exchanges keep an offset and a length into it.
    """

    def __init__(self) -> None:
        self.buffer: bytearray | bytes = bytearray()

    def add(self, body: bytes) -> tuple[int, int]:
        start = len(self.buffer)
        self.buffer += body
        return start, len(body)

    def get(self, start: int, size: int) -> bytes:
        return bytes(memoryview(self.buffer)[start:start + size])

    def freeze(self) -> None:
        """Drop the spare room a growing buffer keeps (an eighth of it, or more)."""
        self.buffer = bytes(self.buffer)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bodies) and other.buffer == self.buffer

    __hash__ = None  # type: ignore[assignment]


@dataclass(slots=True)
class Exchange:
    bodies: Bodies
    start: int
    size: int
    n: int
    file: Any
    line: Any
    instance: Any
    params: bytes
    sample_usage: tuple[dict[str, Any] | None, ...] | None = None

    @property
    def body(self) -> bytes:
        """The saved response body, byte for byte."""
        return self.bodies.get(self.start, self.size)

    @property
    def where(self) -> str:
        return where_of(self.file, self.line, self.instance)


@dataclass(slots=True)
class Instance:
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
    instances: list[Instance] = field(default_factory=list)
    unusable: list[Instance] = field(default_factory=list)
    uniform: bool = True
    # While building: the instances by (source file, source instance).
    groups: dict[tuple[Any, Any], Instance] | None = None

    def group(self, file: Any, instance: Any, where: str) -> Instance:
        assert self.groups is not None
        found = self.groups.get((file, instance))
        if found is None:
            found = self.groups[(file, instance)] = Instance(where)
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


# What `choose` returns: the exchanges (and choices) that answer one prompt, in order.
Selection = list[tuple[Exchange, int | None]]


@dataclass(frozen=True)
class Rules:
    strict: bool = False
    allow_ambiguous: bool = False


class Index:
    def __init__(self, models: dict[str, ModelRun], aliases: dict[str, str] | None = None):
        self.models = models
        self.aliases = dict(aliases or {})
        for client, saved in self.aliases.items():
            if saved not in models:
                raise ValueError(f"--model-alias {client}={saved}: no saved run has model "
                                 f"`{saved}` (saved: {', '.join(sorted(models)) or 'none'})")

    def run(self, model: str | None) -> ModelRun:
        """The saved run a request's `model` selects."""
        if model is None:
            if len(self.models) == 1:
                return next(iter(self.models.values()))
            raise BadRequest("`model` is required: this server holds several models: "
                             + ", ".join(sorted(self.models)), param="model")
        name = self.aliases.get(model, self.aliases.get("*", model))
        run = self.models.get(name)
        if run is None:
            raise ModelNotFound(model, sorted(self.models))
        return run

    def catalog(self, model: str, kind: str) -> PromptCatalog | None:
        """A prompt catalog the index keeps itself, if any (see store.py); else None and
        the server builds one from the saved files on the first miss."""
        return None


def _signature(choice: dict[str, Any]) -> bytes:
    """What makes a generation the same one: its text, reasoning, tool calls and
    finish_reason; not its index, logprobs, or fields one server (or a client's record of
    a stream) adds and another leaves out. Where tool calls were made, an empty content
    and a null one are the same (a stream sends "", a body null)."""
    message = choice.get("message")
    if isinstance(message, dict):
        calls = [((c.get("function") or {}).get("name"), (c.get("function") or {}).get(
            "arguments")) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        content = message.get("content")
        same = [content or None if calls else content,
                message.get("reasoning", message.get("reasoning_content")),
                calls, message.get("function_call"), message.get("refusal"),
                choice.get("finish_reason")]
    else:
        same = [choice.get("text"), choice.get("finish_reason")]
    return hashlib.blake2b(keys.canonical({"s": same}), digest_size=8).digest()


def entry_of(value: Entry | Exchange) -> Entry:
    """The full Entry form of an index value (off the hot path: reports, status)."""
    if isinstance(value, Entry):
        return value
    return Entry([Instance(value.where, [value])])


def prompt_of(record: Record) -> dict[str, Any]:
    if record.endpoint == CHAT_PATH:
        return keys.chat_prompt(record.request)
    return keys.completion_prompt(record.request["prompt"], record.request.get("echo"))


class Builder:
    """Records in, Index out. Records are grouped into instances as they arrive.

    A prompt's first record is kept as a bare Exchange; the Entry and Instance wrappers
    are made only when a second record (or an unusable one) comes for the same prompt.
    Building them for every record and dropping most at the end would leave the heap
    full of holes between the objects that stay.
    """

    def __init__(self) -> None:
        self._models: dict[str, ModelRun] = {}
        self._params: dict[bytes, bytes] = {}
        self._bodies = Bodies()

    def add(self, record: Record) -> None:
        run = self._models.get(record.model)
        if run is None:
            run = self._models[record.model] = ModelRun(record.model)
        run.records += 1
        key = keys.key_of(prompt_of(record))
        source = record.source
        file, line, instance = source.get("file"), source.get("line"), source.get("instance")
        current = run.entries.get(key)
        if record.unusable is not None or record.response is None:
            run.unusable_records += 1
            where = record.where
            group = self._entry(run, key, current).group(file, instance, where)
            if group.unusable is None:
                group.unusable = f"{record.unusable} (saved at {where})"
            return
        params = keys.canonical(keys.sampling_params(record.request))
        params = self._params.setdefault(params, params)
        usage = tuple(record.sample_usage) if record.sample_usage is not None else None
        start, size = self._bodies.add(orjson.dumps(record.response))
        n = len(record.response["choices"])
        exchange = Exchange(self._bodies, start, size, n, file, line, instance, params, usage)
        run.samples += n
        if current is None and n == 1:
            run.entries[key] = exchange
        else:
            self._entry(run, key, current).group(file, instance, exchange.where) \
                .exchanges.append(exchange)

    @staticmethod
    def _entry(run: ModelRun, key: bytes, current: Entry | Exchange | None) -> Entry:
        """The Entry for a prompt, made from its lone Exchange (or from nothing) if need be."""
        if isinstance(current, Entry):
            return current
        entry = Entry(groups={})
        if current is not None:
            entry.group(current.file, current.instance, current.where).exchanges.append(current)
        run.entries[key] = entry
        return entry

    def build(self, aliases: dict[str, str] | None = None) -> Index:
        self._bodies.freeze()
        for run in self._models.values():
            for key, value in run.entries.items():
                if isinstance(value, Entry):
                    run.entries[key] = _settle(value)
        return Index(self._models, aliases)


def _settle(entry: Entry) -> Entry | Exchange:
    """Split usable from unusable instances, decide whether every saved sample is one
    generation, and reduce a lone one-choice exchange to itself."""
    entry.groups = None
    usable = [i for i in entry.instances if i.unusable is None]
    entry.unusable = [i for i in entry.instances if i.unusable is not None]
    entry.instances = usable
    if not entry.unusable and len(usable) == 1 and len(usable[0].exchanges) == 1 \
            and usable[0].exchanges[0].n == 1:
        return usable[0].exchanges[0]
    bodies = [orjson.loads(e.body) for i in usable for e in i.exchanges]
    entry.uniform = len({_signature(c) for b in bodies for c in b["choices"]}) <= 1
    return entry


def build(records: Iterable[Record], aliases: dict[str, str] | None = None) -> Index:
    builder = Builder()
    for record in records:
        builder.add(record)
    return builder.build(aliases)


Cursors = Mapping[Any, int]


def choose(entry: Entry | Exchange, n: int, params: bytes, rules: Rules, cursors: Cursors,
           cursor_key: Any) -> tuple[Selection, tuple[Any, int] | None]:
    """The saved samples that answer a request for `n` samples, and the cursor move to
    commit once the whole request is answered (None: no move). Raises a ReplayError when
    nothing fits; `cursors` is only read."""
    if isinstance(entry, Exchange):
        if n == 1 and (not rules.strict or entry.params == params):
            return [(entry, None)], None
        entry = entry_of(entry)  # the general rules below say why not
    instances = entry.instances
    if not instances:
        reasons = "; ".join(i.unusable or "" for i in entry.unusable[:3])
        raise Unusable(f"this prompt was saved, but its saved answer cannot be replayed: "
                       f"{reasons}")
    uniform = entry.uniform
    if rules.strict:
        instances = _same_params(instances, params)
        uniform = uniform or sum(i.size for i in instances) == 1
        cursor_key = (cursor_key, params)
    if uniform:
        if n == 1:
            return [instances[0].samples()[0]], None
        return _whole(instances, n), None
    if len(instances) > 1 and not rules.allow_ambiguous:
        wheres = ", ".join(i.where for i in instances[:3])
        more = f" and {len(instances) - 3} more" if len(instances) > 3 else ""
        raise Ambiguous(f"{len(instances)} saved instances share this prompt but saved "
                        f"different generations ({wheres}{more}); serving one instance's "
                        "answer to another would corrupt scores. Replay the runs separately, "
                        "or pass --allow-ambiguous to serve them in saved order.")
    if n == 1:
        samples = [s for i in instances for s in i.samples()]
        done = cursors.get(cursor_key, 0)
        if done >= len(samples):
            raise Exhausted(f"all {len(samples)} saved samples of this prompt were already "
                            "served (n=1 calls get them one by one, in saved order); this "
                            "call asks for one more. POST /replay/reset starts over.",
                            param="n")
        return [samples[done]], (cursor_key, done + 1)
    fits = [i for i in instances if i.size == n]
    if len(fits) > 1:
        done = cursors.get((cursor_key, n), 0)
        if done >= len(fits):
            raise Exhausted(f"all {len(fits)} saved instances with n={n} samples of this "
                            "prompt were already served. POST /replay/reset starts over.",
                            param="n")
        return fits[done].whole(), ((cursor_key, n), done + 1)
    return _whole(instances, n), None


def _whole(instances: list[Instance], n: int) -> Selection:
    for instance in instances:
        if instance.size == n:
            return instance.whole()
    sizes = sorted({i.size for i in instances})
    raise NMismatch(f"the request asks for n={n} samples, but this prompt saved "
                    f"{' or '.join(map(str, sizes))} (ask for n=1 one call at a time, or "
                    "for the saved number)", param="n")


def _same_params(instances: list[Instance], params: bytes) -> list[Instance]:
    """The instances, keeping only the exchanges saved with these sampling parameters
    (repeats saved with different seeds are told apart by their seed)."""
    same = [Instance(i.where, kept) for i in instances
            if (kept := [e for e in i.exchanges if e.params == params])]
    if same:
        return same
    saved = orjson.loads(instances[0].exchanges[0].params)
    asked = orjson.loads(params)
    diff = sorted(k for k in saved.keys() | asked.keys() if saved.get(k) != asked.get(k))
    field = diff[0]
    raise ParamsMismatch(
        f"strict mode: `{field}` differs from the saved request ({instances[0].where}): "
        f"requested {orjson.dumps(asked.get(field)).decode()}, saved "
        f"{orjson.dumps(saved.get(field)).decode()}"
        + (f"; also differing: {', '.join(diff[1:])}" if len(diff) > 1 else ""),
        param=field)
