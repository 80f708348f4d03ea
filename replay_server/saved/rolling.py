"""lm-eval's perplexity requests (`loglikelihood_rolling`), rebuilt from the one number a
samples row keeps: the document's summed logprob (issue 35).

lm-eval (`TemplateAPI.loglikelihood_rolling`, 0.4.13) cuts each document's ids into
windows (`utils.get_rolling_token_windows` with `max_seq_len = max_length - 2`,
`context_len = 1`, then `utils.make_disjoint_window`), sends each window as a
loglikelihood request (`echo`, `logprobs: 1`, `max_tokens: 1`), and saves
`sum(window values)` in window order. The run kept no window's value, so one window of
the document carries the whole sum and the others 0.0. The server keys on the request,
so a window two documents share carries one value for both: `assign` chooses the values
so that lm-eval's sum, float by float and in its order, gives every document exactly its
saved value, or names the document it cannot (never a guess). Pure functions: the lm-eval
reader (saved/formats/lm_eval_rolling.py) makes the records.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from .local_tokenizer import LocalTokenizer
from .tokens import DEFAULT_MAX_LENGTH, loglikelihood_input, tok_encode

Key = Hashable  # a window as the server keys it: its ids
# How far from `saved - rest` the search for a carried value goes, each way, in floats.
NEIGHBOURS = 64


def windows(tokenizer: LocalTokenizer, text: str, *, add_bos_token: bool = False,
            max_length: int = DEFAULT_MAX_LENGTH,
            custom_prefix_token_id: int | None = None) -> list[tuple[list[int], int]]:
    """`(ids sent, ctxlen)` of each window lm-eval sends for `text`, in its order."""
    ids = tok_encode(tokenizer, text, add_bos_token=add_bos_token)
    prefix = (custom_prefix_token_id if custom_prefix_token_id is not None
              else tokenizer.prefix_token_id)
    seq = max_length - 2  # TemplateAPI: self.max_length = max_length - 1, then - 1
    if seq < 1:
        raise ValueError(f"max_length {max_length} leaves no room for a window")
    if not ids:
        return []
    if prefix is None:
        raise ValueError("the rolling windows need the tokenizer's BOS or EOS token (or "
                         "custom_prefix_token_id)")
    first = min(seq, len(ids))  # get_rolling_token_windows: the first predicts them all
    pairs = [([prefix] + ids[:first - 1], ids[:first])]
    done = first
    while done < len(ids):
        end = done + min(len(ids) - done, seq)
        pairs.append((ids[end - seq - 1:end - 1], ids[done:end]))
        done = end
    # make_disjoint_window, then TemplateAPI.batch_loglikelihood_requests' cut
    return [loglikelihood_input(a[:len(a) - (len(b) - 1)], b, max_length=max_length)
            for a, b in pairs]


def lm_eval_sums(values: Sequence[float]) -> tuple[float, float]:
    """What Python's `sum(values)` gives lm-eval: the plain left-to-right sum (Python up to
    3.11) and CPython 3.12's compensated one (Neumaier), as `builtin_sum_impl` does it."""
    plain, total, comp = 0.0, 0.0, 0.0
    for x in values:
        plain += x
        t = total + x
        comp += (total - t) + x if abs(total) >= abs(x) else (x - t) + total
        total = t
    if comp and math.isfinite(comp):
        total += comp
    return plain, total


def _exact(values: Sequence[float], saved: float) -> bool:
    return all(s == saved for s in lm_eval_sums(values))


def solve(values: Sequence[float], at: int, saved: float) -> float | None:
    """The value at `values[at]` that makes lm-eval's sum exactly `saved` whichever Python
    runs it: `saved - rest`, or the nearest float around it that does; None if none of
    them does."""
    rest = [v for i, v in enumerate(values) if i != at]
    start = saved - math.fsum(rest)
    up = down = start
    for _ in range(NEIGHBOURS + 1):
        for x in (up, down):
            if math.isfinite(x) and _exact([*values[:at], x, *values[at + 1:]], saved):
                return x
        up, down = math.nextafter(up, math.inf), math.nextafter(down, -math.inf)
    return None


@dataclass
class Assignment:
    """Every window's value, and the documents (by their index) that cannot be served with
    why; their windows (`poisoned`) must answer with an error, not a value."""

    values: dict[Key, float] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    poisoned: set[Key] = field(default_factory=set)


def assign(docs: Sequence[Sequence[Key]], saved: Sequence[float]) -> Assignment:
    """Window values such that each document's windows sum, as lm-eval sums them, to its
    saved value exactly. Documents with the same windows (the same text) are one, if their
    sums agree. A document whose windows are all shared is fixed first (shortest first):
    its value goes on a window still free, the others get 0.0. Then each other document
    puts what its sum needs on its windows of its own. A document that cannot be made
    exact fails: its own windows refuse, or, when it has none, all its windows, and every
    document that sends one of those fails too (lm-eval would get a wrong sum from them
    without a sound)."""
    out = Assignment()
    groups: dict[tuple[Key, ...], list[int]] = {}
    for i, doc in enumerate(docs):
        groups.setdefault(tuple(doc), []).append(i)
    users: dict[Key, set[tuple[Key, ...]]] = {}
    for doc_windows in groups:
        for key in doc_windows:
            users.setdefault(key, set()).add(doc_windows)

    def own(doc_windows: tuple[Key, ...]) -> list[Key]:
        return [k for k in doc_windows if users[k] == {doc_windows}
                and doc_windows.count(k) == 1]

    broken: dict[tuple[Key, ...], str] = {}
    for doc_windows in sorted(groups, key=lambda d: (bool(own(d)), len(d), groups[d][0])):
        sums = {saved[i] for i in groups[doc_windows]}
        reason = "documents with the same text were saved with different sums"
        if len(sums) == 1 and not any(math.isnan(s) for s in sums):
            reason = _fix(doc_windows, sums.pop(), own(doc_windows), users, out.values)
        if reason:
            broken[doc_windows] = reason
    _fail(groups, broken, users, out)
    return out


def _fail(groups: dict[tuple[Key, ...], list[int]], broken: dict[tuple[Key, ...], str],
          users: dict[Key, set[tuple[Key, ...]]], out: Assignment) -> None:
    """The broken documents' windows of their own (all their windows, if they have none)
    answer with an error, and every document that sends one of them is failed."""
    for doc_windows in broken:
        alone = [k for k in doc_windows if users[k] == {doc_windows}]
        out.poisoned.update(alone or doc_windows)
    for doc_windows, indices in groups.items():
        why = broken.get(doc_windows, "")
        if not why and out.poisoned.intersection(doc_windows):
            why = "it shares a window with a document whose sum cannot be made exact"
        for i in indices if why else ():
            out.failed[i] = why
    for key in out.poisoned:
        out.values.pop(key, None)


def _fix(doc_windows: tuple[Key, ...], saved: float, mine: list[Key],
         users: dict[Key, set[tuple[Key, ...]]], values: dict[Key, float]) -> str:
    """Fix the values of one document's windows still free; why not ("" when done), if it
    cannot be made exact."""
    free = [k for k in doc_windows if k not in values]
    single = [k for k in free if doc_windows.count(k) == 1]
    carriers = mine or sorted(single, key=lambda k: len(users[k]))[:1]
    for key in free:
        values[key] = 0.0
    if not carriers:
        if _exact([values[k] for k in doc_windows], saved):
            return ""
        return "its windows are all shared with other documents, whose values do not sum " \
               "to its saved value"
    got = carry([values[k] for k in doc_windows], [doc_windows.index(k) for k in carriers],
                saved)
    if got is None:
        return f"no float on its windows makes lm-eval's sum exactly {saved!r}"
    values.update(zip(doc_windows, got, strict=True))
    return ""


def carry(values: Sequence[float], free: Sequence[int], saved: float) -> list[float] | None:
    """`values` with the places `free` (0.0 now) set so that lm-eval's sum is exactly
    `saved`: the whole sum on one of them; else, when the values before it leave the saved
    value out of reach (the sum of two floats cannot give every float), what was summed
    before one place cancelled there, and the saved value on a later one."""
    for at in free:
        x = solve(values, at, saved)
        if x is not None:
            return [*values[:at], x, *values[at + 1:]]
    for i, j in combinations(free, 2):
        trial = list(values)
        trial[i] = -lm_eval_sums(values[:i])[0]
        x = solve(trial, j, saved)
        if x is not None:
            return [*trial[:j], x, *trial[j + 1:]]
    return None
