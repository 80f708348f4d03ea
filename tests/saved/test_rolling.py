"""saved/rolling.py: lm-eval's perplexity windows, and window values that give every
document its saved sum exactly, float for float, or name the document."""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Hashable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay_server.saved.rolling import Assignment, assign, carry, lm_eval_sums, solve, windows


def served(docs: Sequence[Sequence[Hashable]], saved: Sequence[float],
           out: Assignment) -> None:
    """Every document not failed reads back its saved value under lm-eval's `sum` (this
    Python's, and both sums lm-eval may run with); every failed one sends a poisoned window
    (or sends none and could not be exact)."""
    for i, (doc, value) in enumerate(zip(docs, saved, strict=True)):
        if i in out.failed:
            assert out.poisoned.intersection(doc) or not doc
            continue
        got = [out.values[k] for k in doc]
        assert sum(got) == value and lm_eval_sums(got) == (value, value), (i, got, value)
    assert not out.poisoned.intersection(out.values)


def test_two_documents_sharing_their_first_window() -> None:
    docs, saved = [["w1", "a2"], ["w1", "b2"]], [-41.623999999999995, -34.973]
    out = assign(docs, saved)
    served(docs, saved, out)
    assert out.values == {"w1": 0.0, "a2": saved[0], "b2": saved[1]} and not out.failed


def test_a_document_that_is_the_first_window_of_others() -> None:
    """p3 is p1's and p2's first window alone: that window carries p3's sum, and the
    others' own windows make up the rest, exactly (the local task's case)."""
    docs = [["w1", "a2"], ["w1", "b2"], ["w1"]]
    saved = [-41.623999999999995, -34.973, -21.901]
    out = assign(docs, saved)
    served(docs, saved, out)
    assert out.values["w1"] == -21.901 and not out.failed


def test_identical_documents_saved_with_different_sums_are_named_never_guessed() -> None:
    """Their window of their own refuses; the first window they share with another
    document still serves it."""
    docs, saved = [["w1", "a2"], ["w1", "a2"], ["w1", "b2"], ["c1"]], [-3.0, -3.5, -2.0, -1.0]
    out = assign(docs, saved)
    assert set(out.failed) == {0, 1} and "different sums" in out.failed[0]
    assert out.poisoned == {"a2"} and out.values == {"w1": 0.0, "b2": -2.0, "c1": -1.0}
    served(docs, saved, out)
    docs = [["w1"], ["w1"], ["w1", "b2"]]  # no window of their own: the shared one refuses
    out = assign(docs, [-3.0, -3.5, -2.0])
    assert set(out.failed) == {0, 1, 2} and "shares a window" in out.failed[2]
    assert out.poisoned == {"w1"}


def test_identical_documents_with_one_sum_are_one() -> None:
    docs, saved = [["w1", "a2"], ["w1", "a2"]], [-3.0, -3.0]
    out = assign(docs, saved)
    assert not out.failed
    served(docs, saved, out)


def test_a_document_with_no_window_of_its_own_left() -> None:
    """c = [a, b], a and b single documents: c's sum is theirs, or c cannot be served, and
    then neither can a and b (their windows answer with an error)."""
    docs = [["a"], ["b"], ["a", "b"]]
    out = assign(docs, [-1.5, -2.25, -3.75])
    assert not out.failed
    served(docs, [-1.5, -2.25, -3.75], out)
    out = assign(docs, [-1.5, -2.25, -3.5])
    assert set(out.failed) == {0, 1, 2} and "all shared" in out.failed[2]
    assert out.poisoned == {"a", "b"}


def test_a_window_sent_twice_by_one_document_is_not_its_own() -> None:
    docs, saved = [["w1", "r", "r", "z"]], [-7.0]
    out = assign(docs, saved)
    served(docs, saved, out)
    assert out.values == {"w1": -7.0, "r": 0.0, "z": 0.0}  # its first window of its own
    out = assign([["w1", "w1"]], [-7.0])
    assert out.failed  # no window occurs once: 2x = -7.0 is not for us to guess


def test_a_document_of_no_windows_sums_to_zero() -> None:
    assert not assign([[]], [0.0]).failed
    assert assign([[]], [-1.0]).failed


def test_a_sum_that_is_not_finite_cannot_be_carried() -> None:
    for value in (-math.inf, math.nan):
        out = assign([["w1", "a2"]], [value])
        assert 0 in out.failed and out.poisoned == {"w1", "a2"}


def test_the_carried_value_is_searched_among_neighbouring_floats() -> None:
    """Two shared windows carry values: `saved - rest` does not make lm-eval's sum the
    saved value (its compensated sum, 3.12's, misses it), the float next to it does."""
    a, b, saved = -21.423884508336076, -27.632960027516233, -39.496340400074395
    start = saved - math.fsum([a, b])
    assert lm_eval_sums([a, b, start]) != (saved, saved)
    x = solve([a, b, 0.0], 2, saved)
    assert x == math.nextafter(start, math.inf) and lm_eval_sums([a, b, x]) == (saved, saved)
    assert solve([1e308, 0.0], 1, -math.inf) is None


def test_a_sum_out_of_one_window_s_reach_is_cancelled_then_carried() -> None:
    """-15.709608319450918 + x is never -58.27767934847916 (every such sum is a tie that
    rounds to even, and the saved value is odd): one window of its own cannot carry it,
    two can (the shared value cancelled on the first, the saved one on the second)."""
    shared, saved = -15.709608319450918, -58.27767934847916
    assert solve([shared, 0.0], 1, saved) is None
    docs = [["s"], ["s", "own"], ["s", "own1", "own2"]]
    out = assign(docs, [shared, saved, saved])
    assert list(out.failed) == [1] and "no float" in out.failed[1]
    assert out.values["own1"] == -shared and out.values["own2"] == saved
    served(docs, [shared, saved, saved], out)
    assert carry([shared, 0.0, 0.0], [1, 2], saved) == [shared, -shared, saved]


def test_lm_eval_sums_are_this_python_s_sum() -> None:
    values = [0.1] * 10 + [1e16, 1.0, -1e16]
    plain, compensated = lm_eval_sums(values)
    assert (compensated if sys.version_info >= (3, 12) else plain) == sum(values)
    assert plain != compensated  # the two really differ here: both are checked


@given(st.integers(0, 2**32 - 1))
def test_float_exactness_over_many_shared_windows(seed: int) -> None:
    """Many documents of many windows drawn from a small pool (first windows shared
    often), sums of awkward floats: every document served is exact, and only documents
    that could not be are failed."""
    rng = random.Random(seed)
    pool = [f"w{i}" for i in range(12)]
    docs = [[f"first{rng.randrange(4)}", *rng.sample(pool, rng.randrange(0, 6)),
             *([f"own{i}"] if rng.random() < 0.8 else [])] for i in range(10)]
    saved = [-rng.uniform(0, 300) * rng.choice([1, 1e-7, 1e7]) for _ in docs]
    out = assign(docs, saved)
    served(docs, saved, out)
    for i in out.failed:  # no window of its own, or one of its windows refuses
        assert not any(k.startswith("own") for k in docs[i]) or \
            out.poisoned.intersection(docs[i])


@pytest.mark.harness
@given(st.integers(0, 40), st.integers(3, 12))
def test_windows_are_lm_eval_s(n_tokens: int, max_length: int) -> None:
    """Ids and ctxlen as lm-eval's own window functions and its batch cut make them."""
    from lm_eval import utils

    class Tokens:  # a tokenizer whose ids are the words' numbers, BOS 1
        prefix_token_id = 1

        def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
            return [int(w) for w in text.split()]

    ids = list(range(100, 100 + n_tokens))
    got = windows(Tokens(), " ".join(map(str, ids)), max_length=max_length)  # type: ignore[arg-type]
    pairs = map(utils.make_disjoint_window, utils.get_rolling_token_windows(
        token_list=ids, prefix_token=1, max_seq_len=max_length - 2, context_len=1))
    limit = max_length - 1  # TemplateAPI.max_length
    want = [((a + b)[-limit:], len(a) - max(0, len(a) + len(b) - limit)) for a, b in pairs]
    assert got == want
    assert [t for w, ctxlen in got for t in w[ctxlen:]] == ids  # each token scored once
