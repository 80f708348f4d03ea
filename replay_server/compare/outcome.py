"""The comparison itself: per task and metric, what agrees, what flipped, what is one-sided.

A row is one original task and metric (and the rescored metric it is compared with):
`paired` pairs that both have the metric, `agree` those whose values are the same verdict
(`verdicts.same`: equal, or both NaN, or both null), each flip, and each paired instance
that has the metric on one side only (`one_sided`, never dropped). The row's statistics
are over the pairs where both values are finite numbers: the exact McNemar p-value when
every such value is 0 or 1, else the mean paired difference with its bootstrap interval.

Pairs whose saved generation texts differ are listed too (harnesses post-process texts
differently, so this does not change the exit status, but a same-harness rescoring should
have none). The exit status: 0 only when there is at least one row, every row has pairs
and no flip or one-sided verdict, and no instance is unpaired; else 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from . import stats
from .pairing import Pair, Pairing, Unpaired
from .sides import Side
from .verdicts import Value, Verdict, order, same

MetricMap = Sequence[tuple[str, str]]  # (original metric, rescored metric)


@dataclass(frozen=True, slots=True)
class Flip:
    pair: Pair
    metric: str
    rescored_metric: str
    original: Value
    rescored: Value


@dataclass(frozen=True, slots=True)
class OneSided:
    side: str  # which side has the metric
    verdict: Verdict  # that side's instance


@dataclass
class Row:
    task: str
    metric: str
    rescored_metric: str
    paired: int = 0
    agree: int = 0
    flips: list[Flip] = field(default_factory=list)
    one_sided: list[OneSided] = field(default_factory=list)
    numbers: list[tuple[float, float]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """binary (every compared value 0 or 1), continuous, or other (nothing numeric)."""
        if not self.numbers:
            return "other"
        return "binary" if all(v in (0.0, 1.0) for p in self.numbers for v in p) \
            else "continuous"

    @property
    def discordant(self) -> tuple[int, int]:
        """(original 1 and rescored 0, original 0 and rescored 1)."""
        return (sum(1 for o, r in self.numbers if o > r), sum(1 for o, r in self.numbers
                                                               if o < r))

    def p_value(self) -> float | None:
        return stats.mcnemar_p(*self.discordant) if self.kind == "binary" else None

    @cached_property
    def difference(self) -> stats.Difference | None:
        """The mean paired difference and its interval (a bootstrap: computed once)."""
        if self.kind != "continuous":
            return None
        return stats.mean_difference([r - o for o, r in self.numbers])

    @property
    def certified(self) -> bool:
        return self.paired > 0 and not self.flips and not self.one_sided


@dataclass
class Outcome:
    original: Side
    rescored: Side
    pairing: Pairing
    rows: list[Row]
    left_out: list[tuple[str, str, int]]  # (side, metric, instances) not named by --metric
    # Pairs whose saved generation texts differ: not a verdict, but a sign that the two
    # sides did not score the same generation (or post-process it differently)
    other_texts: list[Pair] = field(default_factory=list)

    @property
    def unpaired(self) -> list[Unpaired]:
        return self.pairing.unpaired

    @property
    def status(self) -> int:
        ok = bool(self.rows) and all(r.certified for r in self.rows) and not self.unpaired
        return 0 if ok else 1


def compare(original: Side, rescored: Side, pairing: Pairing,
            metrics: MetricMap | None = None) -> Outcome:
    rows: dict[tuple[str, str, str], Row] = {}
    for pair in pairing.pairs:
        for metric, theirs in _named(pair, metrics):
            key = (pair.original.task, metric, theirs)
            row = rows.get(key) or rows.setdefault(key, Row(*key))
            _add(row, pair, metric, theirs)
    left_out = _left_out(pairing.pairs, metrics) if metrics is not None else []
    ordered = [rows[k] for k in sorted(rows, key=lambda k: (*order(k[:2]), k[2]))]
    other_texts = [p for p in pairing.pairs if p.original.text is not None
                   and p.rescored.text is not None and p.original.text != p.rescored.text]
    return Outcome(original, rescored, pairing, ordered, left_out, other_texts)


def _named(pair: Pair, metrics: MetricMap | None) -> list[tuple[str, str]]:
    if metrics is not None:
        return list(metrics)
    names = pair.original.scores.keys() | pair.rescored.scores.keys()
    return [(name, name) for name in sorted(names)]


def _add(row: Row, pair: Pair, metric: str, theirs: str) -> None:
    mine, other = pair.original.scores.get(metric), pair.rescored.scores.get(theirs)
    if mine is None and other is None:
        return
    if mine is None or other is None:
        side, verdict = ("original", pair.original) if other is None else ("rescored",
                                                                           pair.rescored)
        row.one_sided.append(OneSided(side, verdict))
        return
    row.paired += 1
    if same(mine.value, other.value):
        row.agree += 1
    else:
        row.flips.append(Flip(pair, metric, theirs, mine.value, other.value))
    if _finite(mine.value) and _finite(other.value):
        assert isinstance(mine.value, float) and isinstance(other.value, float)
        row.numbers.append((mine.value, other.value))


def _finite(value: Value) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def _left_out(pairs: list[Pair], metrics: MetricMap) -> list[tuple[str, str, int]]:
    """Metrics of paired instances that --metric did not name, with how many have each."""
    named = {"original": {m for m, _ in metrics}, "rescored": {t for _, t in metrics}}
    counts: dict[tuple[str, str], int] = {}
    for pair in pairs:
        for side, verdict in (("original", pair.original), ("rescored", pair.rescored)):
            for name in verdict.scores.keys() - named[side]:
                counts[(side, name)] = counts.get((side, name), 0) + 1
    return [(side, name, n) for (side, name), n in sorted(counts.items())]
