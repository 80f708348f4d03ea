"""The nearest-prompt catalog: of every saved prompt, the one sharing the longest prefix
with the request, found by bisection over the sorted prompts; and, where a letter's case or
a word more is the drift, the prompt it drifted from."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.index.catalog import EMPTY, ListCatalog
from replay_server.wire.difference import common_prefix

# Few distinct bytes and short strings: long shared prefixes, duplicates, one prompt a
# prefix of another, and ties between the two neighbours are common. (Lower-case letters
# with no spaces: no letter case or word to edit, so the longest prefix is the nearest.)
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


def question(text: str) -> bytes:
    return orjson.dumps({"kind": "chat", "messages": [{"role": "user", "content": text}]},
                        option=orjson.OPT_SORT_KEYS)


WORDS = ("what which how many is are was the a of in on to for and capital river "
         "mountain city country largest oldest first number sum apples").split()
SAVED = [(question(" ".join(random.Random(i).choices(WORDS, k=9)).capitalize() + "?"),
          f"run.jsonl:{i + 1}") for i in range(3000)]
TARGET = question("What is the capital of France?")
UNRELATED = [(question("what about the weather in Paris?"), "other.jsonl:1"),
             (question("What is the bigger number, 7 or 9?"), "other.jsonl:2")]
CATALOG = ListCatalog([*SAVED, (TARGET, "run.jsonl:9999"), *UNRELATED])


@pytest.mark.parametrize("asked", [
    "what is the capital of france?", "WHAT IS THE CAPITAL OF FRANCE?",
    "What is the Capital of France?", "what Is The Capital Of France?"])
def test_a_prompt_differing_only_in_letter_case_is_paired_with_it(asked: str) -> None:
    """Not with a prompt that shares more bytes first (`what about...`, `What is the
    bigger...`)."""
    assert CATALOG.nearest(question(asked)) == (orjson.loads(TARGET), "run.jsonl:9999")


@pytest.mark.parametrize("asked", [
    "What exactly is the capital of France?", "Please, what is the capital of France?",
    "What is the capital city of France?"])
def test_a_prompt_with_a_word_inserted_early_is_paired_with_it(asked: str) -> None:
    assert CATALOG.nearest(question(asked)) == (orjson.loads(TARGET), "run.jsonl:9999")


def test_a_miss_like_no_saved_prompt_is_still_paired_by_its_longest_prefix() -> None:
    asked = question("What is the capital of Spain?")
    found = CATALOG.closest(asked)
    assert found is not None and CATALOG.prompt(found) == TARGET
    unrelated = question("Zebras are striped.")
    found = CATALOG.closest(unrelated)
    longest = max(common_prefix(p, unrelated) for p, _ in CATALOG.items())
    assert found is not None and common_prefix(CATALOG.prompt(found), unrelated) == longest


@pytest.mark.parametrize("fill", [b"a", b"="], ids=["one long word", "no word at all"])
def test_a_miss_in_a_huge_prompt_scans_a_few_bytes_around_where_it_stops(
        fill: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The search for words looks at the words near where the match stops, never a whole
    prompt: in a 2 MB run of one letter (or of no letter) it walked back byte by byte in
    Python, seconds of the event loop per miss at the 16 MB body cap. Counted in bytes
    looked at, not timed."""
    import replay_server.index.catalog as catalog

    looked = 0
    word_byte = catalog._word_byte

    def counting(data: bytes, at: int) -> bool:
        nonlocal looked
        looked += 1
        return word_byte(data, at)

    monkeypatch.setattr(catalog, "_word_byte", counting)
    half = (fill * 1_000_000).decode()
    saved = ListCatalog([(question(half + "X" + half), "run.jsonl:1"),
                         (question("Zebras"), "run.jsonl:2")])
    found = saved.nearest(question(half + "Y" + half))
    assert found is not None and found[1] == "run.jsonl:1"
    assert looked < 50_000  # (2 million before)
