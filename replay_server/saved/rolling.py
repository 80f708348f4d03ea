"""lm-eval's perplexity requests (`loglikelihood_rolling`), rebuilt from the one number a
samples row keeps: the document's summed logprob (issue 35).

lm-eval (`TemplateAPI.loglikelihood_rolling`, 0.4.13) cuts each document's ids into
windows (`utils.get_rolling_token_windows` with `max_seq_len = max_length - 2`,
`context_len = 1`, then `utils.make_disjoint_window`), sends each window as a
loglikelihood request (`echo`, `logprobs: 1`, `max_tokens: 1`), and saves
`sum(window values)` in window order; it caches and merges no window. The run kept no
window's value, so one window of the document carries the whole sum and the others 0.0
(or, where no float on one window can give the sum, two of its windows: the sum so far
cancelled on one, the saved value on the next). The server keys on the request,
so a window two documents share carries one value for both: `assign` chooses the values
so that lm-eval's sum, float by float and in its order, gives every document exactly its
saved value, or names the document it cannot (never a guess). Pure functions: the lm-eval
reader (saved/formats/lm_eval_rolling.py) makes the records.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

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
    them does. (A 0.0 changes neither sum: only the other values are summed.)"""
    before = [v for v in values[:at] if v]
    after = [v for v in values[at + 1:] if v]
    up = down = saved - math.fsum(before + after)
    for _ in range(NEIGHBOURS + 1):
        for x in (up, down):
            if math.isfinite(x) and _exact([*before, x, *after], saved):
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


# A document's windows (the same text: one document), and the indices of its documents.
Group = tuple[tuple[Key, ...], list[int]]


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
    numbers: dict[tuple[Key, ...], int] = {}
    groups: list[Group] = []
    for i, doc in enumerate(docs):
        number = numbers.setdefault(tuple(doc), len(numbers))
        if number == len(groups):
            groups.append((tuple(doc), []))
        groups[number][1].append(i)
    users: dict[Key, set[int]] = {}
    for number, (keys, _) in enumerate(groups):
        for key in keys:
            users.setdefault(key, set()).add(number)
    mine = [_own(keys, users) for keys, _ in groups]
    broken: dict[int, str] = {}
    for number in sorted(range(len(groups)),
                         key=lambda g: (bool(mine[g]), len(groups[g][0]), g)):
        keys, indices = groups[number]
        sums = {saved[i] for i in indices}
        reason = "documents with the same text were saved with different sums"
        if len(sums) == 1 and not any(math.isnan(s) for s in sums):
            reason = _fix(keys, sums.pop(), mine[number], users, out.values)
        if reason:
            broken[number] = reason
    _fail(groups, broken, users, out)
    return out


def _own(keys: tuple[Key, ...], users: dict[Key, set[int]]) -> list[int]:
    """The places of the windows only this document sends, and only once."""
    once = Counter(keys)
    return [at for at, key in enumerate(keys) if len(users[key]) == 1 and once[key] == 1]


def _fail(groups: list[Group], broken: dict[int, str], users: dict[Key, set[int]],
          out: Assignment) -> None:
    """The broken documents' windows of their own (all their windows, if they have none)
    answer with an error, and every document that sends one of them is failed."""
    for number in broken:
        keys = groups[number][0]
        out.poisoned.update([k for k in keys if len(users[k]) == 1] or keys)
    for number, (keys, indices) in enumerate(groups):
        why = broken.get(number, "")
        if not why and not out.poisoned.isdisjoint(keys):
            why = "it shares a window with a document whose sum cannot be made exact"
        for i in indices if why else ():
            out.failed[i] = why
    for key in out.poisoned:
        out.values.pop(key, None)


def _fix(keys: tuple[Key, ...], saved: float, mine: list[int], users: dict[Key, set[int]],
         values: dict[Key, float]) -> str:
    """Fix the values of one document's windows still free; why not ("" when done), if it
    cannot be made exact."""
    once = Counter(keys)
    free = [at for at, key in enumerate(keys) if key not in values]
    for at in free:
        values[keys[at]] = 0.0
    single = [at for at in free if once[keys[at]] == 1]
    carriers = mine or sorted(single, key=lambda at: len(users[keys[at]]))[:1]
    if not carriers:
        if _exact([values[k] for k in keys], saved):
            return ""
        return "its windows are all shared with other documents, whose values do not sum " \
               "to its saved value"
    got = carry([values[k] for k in keys], carriers, saved)
    if got is None:
        return f"no float on its windows makes lm-eval's sum exactly {saved!r}"
    values.update(zip(keys, got, strict=True))
    return ""


def carry(values: Sequence[float], free: Sequence[int], saved: float) -> list[float] | None:
    """`values` with the places `free` (0.0 now) set so that lm-eval's sum is exactly
    `saved`: the whole sum on the first of them (or the last); else, when the values
    before it leave the saved value out of reach (the sum of two floats cannot give every
    float), what was summed before the last but one cancelled there, and the saved value
    on the last. A few tries, whatever the document's length."""
    for at in dict.fromkeys((free[0], free[-1])):
        x = solve(values, at, saved)
        if x is not None:
            return [*values[:at], x, *values[at + 1:]]
    for i, j in zip(free[-2:-1], free[-1:], strict=False):
        trial = list(values)
        trial[i] = -lm_eval_sums(values[:i])[0]
        x = solve(trial, j, saved)
        if x is not None:
            return [*trial[:j], x, *trial[j + 1:]]
    return None
