"""Which saved samples answer a request: every sample and repeat rule, in one place.

Applied by `choose`, to the entry a request's key found (docs/design.md, "Samples"):
1. No usable instance: `replay_unusable` if some instance was saved unusable.
2. Strict mode: only the exchanges whose saved sampling parameters equal the request's.
3. A request with a `seed`, where every usable saved sample carries its own seed, all
   different (oe-eval's `generation_seeds`): the sample saved with that seed, statelessly,
   in any order, any number of times; a seed that was not saved is
   `replay_params_mismatch`.
4. Every saved sample is one generation ("uniform", the greedy case): `n=1` gets it, any
   number of times; `n=k` gets an instance that saved exactly k samples.
5. Instances that saved different generations: `replay_ambiguous`, unless the user allowed
   serving them in saved order (`--allow-ambiguous`).
6. `n` equal to an instance's saved count: that instance, whole, any number of times (with
   several such instances under `--allow-ambiguous`: one after the other, per `n`).
   `n=1` against several samples: the samples in saved order, one per call (the per-key
   cursor, the only state: which samples are taken), then `replay_exhausted`. Anything
   else: `replay_n_mismatch`.

Then, for a streamed request only, what is sent for the samples chosen (`streamed`): when
they are not one recorded stream themselves but a saved exchange recorded streamed holds
the same generations (a run recorded once unstreamed, once streamed), its recorded frames,
byte for byte. What was chosen (the cursor, the samples counted as used) stays as chosen.

Two saved samples are the same generation only when their family says so
(`Family.generations`: for chat and completions, when their whole saved choices are
equal but for the index).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import Ambiguous, Exhausted, NMismatch, ParamsMismatch, Unusable
from .index import Entry, Exchange, Instance, Selection, entry_of

# A saved body's generation ids, one per sample (`Family.generations`).
Generations = Callable[[dict[str, Any]], list[bytes]]


@dataclass(frozen=True)
class Rules:
    strict: bool = False
    allow_ambiguous: bool = False


Cursors = Mapping[Any, int]
"""Per cursor key, the saved samples taken, a bit each (the sample at place i: bit i). A
call gets the first one not taken: the next in saved order, or one given back (its answer
was never delivered) before any after it."""


def first_free(taken: int) -> int:
    """The place of the first sample not taken."""
    return (~taken & (taken + 1)).bit_length() - 1


def settle(entry: Entry) -> Entry | Exchange:
    """Once every record is in: split usable from unusable instances, decide whether every
    saved sample is one generation (by its family's `generations`, which the builder gave
    it), index the samples by seed where each has its own, and reduce a lone one-choice
    exchange to itself."""
    generations = entry.generations
    assert generations is not None, "an entry settles once, as it was built"
    entry.groups = entry.generations = None
    usable = [i for i in entry.instances if i.unusable is None]
    entry.unusable = [i for i in entry.instances if i.unusable is not None]
    entry.instances = usable
    if not entry.unusable and len(usable) == 1 and len(usable[0].exchanges) == 1 \
            and usable[0].exchanges[0].n == 1:
        return usable[0].exchanges[0]
    bodies = [orjson.loads(e.body) for i in usable for e in i.exchanges]
    entry.uniform = len({g for b in bodies for g in generations(b)}) <= 1
    entry.by_seed = None if entry.uniform else seeds(usable)
    return entry


def needs_cursor(value: Entry | Exchange) -> bool:
    """Whether n=1 calls for this prompt may get different saved samples one by one: the
    only replay state, which several worker processes could not share."""
    return isinstance(value, Entry) and not value.uniform


def seeds(instances: list[Instance]) -> dict[int, tuple[Exchange, int | None]] | None:
    """seed -> saved sample, when every sample carries its own seed, all different."""
    found: dict[int, tuple[Exchange, int | None]] = {}
    for instance in instances:
        for exchange, choice in instance.samples():
            seed = orjson.loads(exchange.params).get("seed")
            if exchange.n != 1 or not isinstance(seed, int) or seed in found:
                return None
            found[seed] = (exchange, choice)
    return found if len(found) > 1 else None


def choose(entry: Entry | Exchange, n: int, params: bytes, seed: Any, rules: Rules,
           cursors: Cursors, cursor_key: Any) -> tuple[Selection, tuple[Any, int] | None]:
    """The saved samples that answer a request for `n` samples, and the one it takes from
    a cursor, as (cursor key, place), for the caller to mark taken once the whole request
    is decided (None: none). Raises a ReplayError when nothing fits; `cursors` is only
    read. `params` are the request's canonical sampling
    parameters (strict mode only), `seed` its `seed`."""
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
    if not uniform and entry.by_seed is not None and seed is not None and n == 1:
        return [_by_seed(entry.by_seed, seed)], None
    if uniform:
        if n == 1:
            return [instances[0].samples()[0]], None
        return _whole(instances, n), None
    if len(instances) > 1 and not rules.allow_ambiguous:
        raise _ambiguous(instances)
    if n == 1:
        samples = [s for i in instances for s in i.samples()]
        place = first_free(cursors.get(cursor_key, 0))
        if place >= len(samples):
            raise Exhausted(f"all {len(samples)} saved samples of this prompt were already "
                            "served (n=1 calls get them one by one, in saved order); this "
                            "call asks for one more. POST /replay/reset starts over"
                            + (", or send the saved seeds" if entry.by_seed else "") + ".",
                            param="n")
        return [samples[place]], (cursor_key, place)
    fits = [i for i in instances if i.size == n]
    if len(fits) > 1:  # only under --allow-ambiguous: the instances in saved order
        place = first_free(cursors.get((cursor_key, n), 0))
        if place >= len(fits):
            raise Exhausted(f"all {len(fits)} saved instances with n={n} samples of this "
                            "prompt were already served. POST /replay/reset starts over.",
                            param="n")
        return fits[place].whole(), ((cursor_key, n), place)
    return _whole(instances, n), None


def streamed(entry: Entry | Exchange, selection: Selection, strict: bool,
             generations: Generations) -> Selection:
    """What a streamed request is sent for the samples `choose` chose: the saved exchange
    whose recorded frames carry the same generations (by the family's `generations`), in
    the same order, when the samples are not such a recording already; else the samples.
    Under `strict`, only an exchange saved with the same sampling parameters."""
    if not isinstance(entry, Entry) or (len(selection) == 1 and selection[0][1] is None
                                        and selection[0][0].stream is not None):
        return selection
    params = selection[0][0].params
    recordings = [e for i in entry.instances for e in i.exchanges
                  if e.stream is not None and (not strict or e.params == params)]
    if not recordings:
        return selection
    wanted = _generations_of(selection, generations)
    for exchange in recordings:
        if exchange.n == len(wanted) and generations(orjson.loads(exchange.body)) == wanted:
            return [(exchange, None)]
    return selection


def _generations_of(selection: Selection, generations: Generations) -> list[bytes]:
    found: list[bytes] = []
    for exchange, choice in selection:
        ids = generations(orjson.loads(exchange.body))
        found += ids if choice is None else [ids[choice]]
    return found


def _by_seed(by_seed: dict[int, tuple[Exchange, int | None]], seed: Any
             ) -> tuple[Exchange, int | None]:
    found = by_seed.get(seed) if isinstance(seed, int) else None
    if found is None:
        saved = sorted(by_seed)
        shown = ", ".join(map(str, saved[:8])) + (", ..." if len(saved) > 8 else "")
        raise ParamsMismatch(f"this prompt saved one sample per seed ({shown}), none with "
                             f"the requested seed {orjson.dumps(seed).decode()}", param="seed")
    return found


def _ambiguous(instances: list[Instance]) -> Ambiguous:
    wheres = ", ".join(i.where for i in instances[:3])
    more = f" and {len(instances) - 3} more" if len(instances) > 3 else ""
    message = (f"{len(instances)} saved instances share this prompt but saved different "
               f"generations ({wheres}{more}); serving one instance's answer to another "
               "would corrupt scores.")
    differing = _differing_params(instances)
    if differing:
        message += (f" Their saved sampling parameters differ ({', '.join(differing)}): "
                    "--strict serves the instance whose parameters equal the request's.")
    else:
        message += " Replay the runs separately, or pass --allow-ambiguous to serve them in "\
                   "saved order."
    return Ambiguous(message)


def _differing_params(instances: list[Instance]) -> list[str]:
    saved = [orjson.loads(e.params) for i in instances for e in i.exchanges]
    names = sorted({k for p in saved for k in p})
    return [k for k in names if len({orjson.dumps(p.get(k)) for p in saved}) > 1]


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
    diff = sorted(k for k in saved.keys() | asked.keys() if saved.get(k) != asked.get(k)) \
        or sorted(saved.keys() | asked.keys())
    field = diff[0] if diff else "temperature"
    raise ParamsMismatch(
        f"strict mode: `{field}` differs from the saved request ({instances[0].where}): "
        f"requested {orjson.dumps(asked.get(field)).decode()}, saved "
        f"{orjson.dumps(saved.get(field)).decode()}"
        + (f"; also differing: {', '.join(diff[1:])}" if len(diff) > 1 else ""),
        param=field)
