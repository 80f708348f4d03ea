"""The journal's events as bytes, and back: what one replica counted, for every other to
fold into a `Stats` of its own (`Stats.apply`). No store in here.

An event is JSON (orjson) but for the one that holds saved samples (`delivered`): its
samples are said by their place in their prompt's entry (instance, exchange, choice), and
each reader resolves them through its own index, which the run's shape (`shape`) makes
the same as everyone's.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from ...index.index import Entry, Exchange, Index, Selection, entry_of
from ...index.samples import Rules
from ...wire import keys

# What this module writes; a reader of another version refuses to share the store.
JOURNAL_VERSION = 1


def shape(index: Index) -> dict[str, Any]:
    """What makes two loaded runs the same run to the state: each model's name, records,
    samples, prompts and unusable records, a digest of what they hold (`Index.content`:
    two seeds of one model and benchmark share the rest), the key version, the journal's
    version."""
    return {"key_version": keys.KEY_VERSION, "journal": JOURNAL_VERSION,
            "content": index.content,
            "models": {name: [run.records, run.samples, len(run.entries),
                              run.unusable_records]
                       for name, run in sorted(index.models.items())}}


def registered(index: Index, rules: Rules) -> dict[str, Any]:
    """What every replica under one prefix must share: the run's shape, and the rules
    that name its cursors (--strict keys them by the sampling parameters too: a replica
    with it and one without would each hand out the same samples)."""
    return {**shape(index), "rules": {"strict": rules.strict,
                                      "allow_ambiguous": rules.allow_ambiguous}}


def shape_digest(index: Index) -> str:
    """A short digest of the run's shape: the default key prefix's."""
    return hashlib.sha256(orjson.dumps(shape(index), option=orjson.OPT_SORT_KEYS)
                          ).hexdigest()[:12]


def encode(event: dict[str, Any]) -> bytes:
    if event["kind"] != "delivered":
        return orjson.dumps(event)
    keys_ = event["keys"]
    chosen = [[entry, selection] for entry, selection in event["chosen"]]
    return orjson.dumps({**event, "keys": [k.hex() for k in keys_],
                         "chosen": [_places(entry, s) for entry, s in chosen],
                         "sent": [_places(entry, s) for (entry, _), s
                                  in zip(chosen, event["sent"], strict=True)]})


def decode(data: bytes, index: Index) -> dict[str, Any]:
    event: dict[str, Any] = orjson.loads(data)
    if event["kind"] != "delivered":
        return event
    entries = index.models[event["model"]].entries
    found = [bytes.fromhex(k) for k in event["keys"]]
    values = [entries.get(k) for k in found]
    if None in values:  # (the run's shape is checked at start: another run's event)
        raise ValueError(f"an answer of a prompt that model {event['model']!r} lacks")
    event["keys"] = found
    event["chosen"] = [(value, _selection(value, places))
                       for value, places in zip(values, event["chosen"], strict=True)
                       if value is not None]
    event["sent"] = [_selection(value, places)
                     for value, places in zip(values, event["sent"], strict=True)
                     if value is not None]
    return event


def _places(value: Entry | Exchange, selection: Selection) -> list[list[Any]]:
    """Each sample of `selection` as [instance, exchange, choice] in its entry."""
    where = {e.start: (i, j) for i, instance in enumerate(entry_of(value).instances)
             for j, e in enumerate(instance.exchanges)}
    return [[*where[exchange.start], choice] for exchange, choice in selection]


def _selection(value: Entry | Exchange, places: list[list[Any]]) -> Selection:
    instances = entry_of(value).instances
    return [(instances[i].exchanges[j], choice) for i, j, choice in places]
