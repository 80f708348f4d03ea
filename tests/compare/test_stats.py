"""The paired statistics: the exact McNemar p-value and the seeded bootstrap."""

from __future__ import annotations

import importlib
import math
import random
from fractions import Fraction

import pytest

from replay_server.compare.stats import RESAMPLES, mcnemar_p, mean_difference


@pytest.mark.parametrize(("b", "c", "p"), [
    (0, 0, Fraction(1)),                     # no discordant pair
    (0, 5, Fraction(2, 2 ** 5)),             # 2 * P(X = 0), X ~ Bin(5, 1/2)
    (1, 9, Fraction(2 * (1 + 10), 2 ** 10)),  # 2 * (C(10,0) + C(10,1)) / 2^10
    (3, 3, Fraction(1)),                     # 2 * P(X <= 3) > 1, capped
    (4, 1, Fraction(2 * (1 + 5), 2 ** 5)),   # symmetric in b and c
    (0, 60, Fraction(2, 2 ** 60)),           # exact far in the tail
])
def test_mcnemar_is_the_exact_two_sided_sign_test(b: int, c: int, p: Fraction) -> None:
    assert mcnemar_p(b, c) == float(p)


def test_a_large_count_stays_exact_and_in_range() -> None:
    assert mcnemar_p(7000, 7267) == mcnemar_p(7267, 7000)
    assert 0 < mcnemar_p(7000, 7267) < 0.05 < mcnemar_p(7000, 7050) <= 1


@pytest.mark.harness
def test_mcnemar_matches_scipy_binomtest() -> None:
    # scipy comes with the harness extra (lm-eval's dependencies); typed as Any
    binomtest = importlib.import_module("scipy.stats").binomtest

    rng = random.Random(1)
    for _ in range(200):
        b, c = rng.randrange(0, 80), rng.randrange(0, 80)
        if b + c == 0:
            continue
        expected = binomtest(min(b, c), b + c, 0.5).pvalue
        assert mcnemar_p(b, c) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_the_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    differences = [0.0] * 90 + [0.5] * 7 + [-1.0] * 3
    first, again = mean_difference(differences), mean_difference(differences)
    assert first == again
    assert first.mean == pytest.approx(0.005)
    assert first.low < first.mean < first.high
    draw = random.Random(2)
    noisy = [draw.uniform(-1, 1) for _ in range(50)]
    assert mean_difference(noisy, seed=1) != mean_difference(noisy)
    assert math.isclose(mean_difference([0.25] * 10).low, 0.25)  # every resample the same


def test_the_interval_is_the_percentiles_of_the_resampled_means() -> None:
    differences = [float(i) for i in range(-5, 6)]
    rng = random.Random(0)
    means = sorted(math.fsum(rng.choices(differences, k=11)) / 11 for _ in range(RESAMPLES))
    found = mean_difference(differences)
    assert (found.low, found.high) == (means[25], means[974])
    with pytest.raises(ValueError):
        mean_difference([])
