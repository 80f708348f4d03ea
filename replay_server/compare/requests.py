"""The requests each rescored instance sent, keyed exactly as the server keyed them.

The rescored harness's files are read by replay-server's own readers (the ones `serve`
uses: they rebuild each request the harness sent, from inspect_ai's `call.request` to
lm-eval's arguments), and each request is keyed by its family's `parse`, the server's own
path from a request body to its keys. A request with several forms (lm-eval's text prompt and
its token ids) is one request with alternative keys: the harness sent one of them.
Nothing here guesses: an instance whose requests cannot be keyed has none, and is
unpaired with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import ReplayServerError
from ..paths import NO_GENERATION
from ..saved.loader import context, plan, read
from ..saved.record import Record
from ..wire.families import family_of
from .verdicts import Verdict, resolved

# One request: its alternative (endpoint, key in hex) forms.
Request = tuple[tuple[str, str], ...]


@dataclass
class Asked:
    """A saved record's source and its request's keys (or why it has none)."""

    source: dict[str, Any]
    request: Request | None
    why_not: str | None = None


@dataclass
class Requests:
    """The rescored run's saved requests, found by the file and instance (or line) their
    records name."""

    by_instance: dict[tuple[str | None, Any], list[Asked]] = field(default_factory=dict)
    by_line: dict[tuple[str | None, Any], list[Asked]] = field(default_factory=dict)

    def of(self, verdict: Verdict) -> list[Asked]:
        """The requests of one rescored instance, in saved order."""
        saved = verdict.saved
        if saved is None:
            return []
        found = (self.by_instance.get((saved.file, saved.instance), [])
                 if saved.instance is not None else self.by_line.get((saved.file, saved.line),
                                                                      []))
        return [a for a in found if saved.holds(a.source)]


def read_requests(paths: Sequence[str], tokenizer: str | None = None) -> Requests:
    """Every saved request under `paths`, keyed (LoadError on a bad file)."""
    ctx = context(tokenizer=tokenizer)
    found = Requests()
    for record in read(plan(paths, ctx), ctx):
        if record.endpoint in NO_GENERATION:
            continue  # a tokenizer call or a model entry: no instance's generation
        source = record.source
        asked = Asked(source, *_keys(record))
        file = resolved(source.get("file"))
        found.by_instance.setdefault((file, source.get("instance")), []).append(asked)
        found.by_line.setdefault((file, source.get("line")), []).append(asked)
    return found


def _keys(record: Record) -> tuple[Request | None, str | None]:
    forms = []
    family = family_of(record.endpoint)
    for body in [record.request, *(record.also or [])]:
        if family.previous_id(body) is not None:
            return None, ("a Responses API request continuing a saved response (its key "
                          "needs the saved run)")
        try:
            parsed = family.parse(orjson.dumps(body))
            if family.chained:
                parsed.key(None)
        except ReplayServerError as e:
            return None, f"its saved request cannot be keyed: {e.message}"
        forms += [(record.endpoint, key.hex()) for key in parsed.keys]
    return tuple(forms), None
