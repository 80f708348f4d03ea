"""The nearest-prompt catalog: of every saved prompt, the one sharing the longest prefix
with the request, found by one bisection over the sorted prompts."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.index.catalog import EMPTY, ListCatalog
from replay_server.wire.difference import common_prefix

# Few distinct bytes and short strings: long shared prefixes, duplicates, one prompt a
# prefix of another, and ties between the two neighbours are common.
prompts = st.binary(max_size=12).map(lambda b: bytes(x % 3 + 97 for x in b))
wheres = st.text(alphabet=st.sampled_from("ab:1\udc80é"), max_size=4)
saved_rows = st.lists(st.tuples(prompts, wheres), max_size=60)


@settings(max_examples=400, deadline=None)
@given(saved_rows, st.lists(prompts, min_size=1, max_size=8))
def test_the_prompt_found_shares_the_longest_prefix_of_any_saved_prompt(
        saved: list[tuple[bytes, str]], asked: list[bytes]) -> None:
    catalog = ListCatalog(list(saved))
    # saved prompts themselves, and prompts a little before and after them
    near = [p + tail for p, _ in saved[:8] for tail in (b"", b"a", b"\x00", b"\xff")]
    near += [p[:-1] for p, _ in saved[:8]]
    for canonical in asked + near:
        found = catalog.closest(canonical)
        if not saved:
            assert found is None
            continue
        assert found is not None
        longest = max(common_prefix(p, canonical) for p, _ in saved)
        assert common_prefix(catalog.prompt(found), canonical) == longest
        assert (catalog.prompt(found), catalog.where(found)) in saved


@settings(max_examples=200, deadline=None)
@given(saved_rows)
def test_the_catalog_lists_every_saved_prompt_in_order(saved: list[tuple[bytes, str]]) -> None:
    catalog = ListCatalog(iter(saved))  # any iterable, not only a list
    assert list(catalog.items()) == sorted(saved)
    assert len(catalog) == len(saved)


def test_a_list_given_is_sorted_in_place_and_kept() -> None:
    """The index builder hands its own list over: a large catalog is never held twice."""
    rows = [(b"b", "x:2"), (b"a", "x:1")]
    catalog = ListCatalog(rows)
    assert rows == [(b"a", "x:1"), (b"b", "x:2")] and list(catalog.items()) == rows


def test_an_empty_catalog_finds_nothing() -> None:
    assert EMPTY.nearest(b'{"a":1}') is None and list(EMPTY.items()) == []


def chat(text: str) -> dict[str, Any]:
    return {"kind": "chat", "messages": [
        {"role": "system", "content": "You are a careful assistant. " * 20},
        {"role": "user", "content": text}]}


def test_realistic_prompts() -> None:
    """Prompts sharing a long system message: every saved prompt is found as itself, and
    a near miss finds the saved prompt it was made from."""
    saved = [(orjson.dumps(chat(f"Question {i}: what is {i * 7}?")), f"run.jsonl:{i + 1}")
             for i in range(1200)]
    catalog = ListCatalog(list(saved))
    for prompt, where in saved:
        assert catalog.nearest(prompt) == (orjson.loads(prompt), where)
    for i in range(0, 1200, 7):
        found = catalog.nearest(orjson.dumps(chat(f"Question {i}: what is {i * 7}?!")))
        assert found == (chat(f"Question {i}: what is {i * 7}?"), f"run.jsonl:{i + 1}")
