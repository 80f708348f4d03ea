"""Paired statistics over the verdicts of one task and metric, with the standard library.

- 0/1 metrics: the exact two-sided McNemar test, i.e. the binomial (sign) test with p = 1/2
  on the discordant pairs (b: 1 then 0, c: 0 then 1): p = min(1, 2 P(X <= min(b, c))) for
  X ~ Binomial(b + c, 1/2), computed in exact integers; 1.0 with no discordant pair.
- Continuous metrics: the mean paired difference (rescored - original) and a percentile
  bootstrap interval: RESAMPLES resamples of the pairs with replacement, from a generator
  seeded with SEED, so that the same inputs always print the same interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

SEED = 0
RESAMPLES = 1000
LEVEL = 0.95


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for b and c discordant pairs."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    term = total = 1  # C(n, 0); each next C(n, i + 1) = C(n, i) (n - i) / (i + 1), exactly
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return float(min(Fraction(1), Fraction(2 * total, 2 ** n)))


@dataclass(frozen=True, slots=True)
class Difference:
    mean: float
    low: float
    high: float


def mean_difference(differences: Sequence[float], resamples: int = RESAMPLES,
                    seed: int = SEED) -> Difference:
    """The mean of paired differences, with its bootstrap percentile interval (LEVEL)."""
    n = len(differences)
    if n == 0:
        raise ValueError("no paired differences")
    mean = math.fsum(differences) / n
    if all(d == differences[0] for d in differences):
        return Difference(mean, mean, mean)  # every resample is the same
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(differences, k=n)) / n for _ in range(resamples))
    cut = (1 - LEVEL) / 2
    return Difference(mean, means[int(cut * resamples)],
                      means[min(resamples - 1, math.ceil((1 - cut) * resamples) - 1)])
