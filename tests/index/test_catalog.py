"""The compressed prompt catalog finds exactly what the plain sorted list finds."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.index import catalog as nearest
from replay_server.index.catalog import EMPTY, Catalog, SortedCatalog, closest


class PlainCatalog:
    """The catalog as it was before compression, kept as the reference: every prompt an
    exact bytes object in a sorted list, and a `where` per prompt."""

    def __init__(self, saved: list[tuple[bytes, str]]) -> None:
        rows = sorted(saved)
        self.prompts = [p for p, _ in rows]
        self.wheres = [w for _, w in rows]

    def nearest_saved(self, canonical: bytes) -> tuple[bytes, str] | None:
        best = closest(self.prompts.__getitem__, len(self.prompts), canonical)
        if best is None:
            return None
        return self.prompts[best], self.wheres[best]


# Few distinct bytes and short strings: long shared prefixes, duplicates, one prompt a
# prefix of another, and ties between the two neighbours are common.
prompts = st.binary(max_size=12).map(lambda b: bytes(x % 3 + 97 for x in b))
wheres = st.text(alphabet=st.sampled_from("ab:1\udc80é"), max_size=4)
saved_rows = st.lists(st.tuples(prompts, wheres), max_size=60)


@settings(max_examples=400, deadline=None)
@given(saved_rows, st.lists(prompts, min_size=1, max_size=8), st.integers(1, 5))
def test_the_compressed_catalog_finds_what_the_plain_one_finds(
        saved: list[tuple[bytes, str]], asked: list[bytes], size: int) -> None:
    plain = PlainCatalog(saved)
    catalog = Catalog.build(list(saved), size)
    # saved prompts themselves, and prompts a little before and after them, at block edges
    near = [p + tail for p, _ in saved[:8] for tail in (b"", b"a", b"\x00", b"\xff")]
    near += [p[:-1] for p, _ in saved[:8]]
    for canonical in asked + near:
        assert catalog.nearest_saved(canonical) == plain.nearest_saved(canonical)


@settings(max_examples=200, deadline=None)
@given(saved_rows, st.integers(1, 5))
def test_the_compressed_catalog_lists_every_saved_prompt_in_order(
        saved: list[tuple[bytes, str]], size: int) -> None:
    catalog = Catalog.build(iter(saved), size)  # any iterable, not only a list
    assert list(catalog.items()) == sorted(saved)
    assert len(catalog) == len(saved)


def test_building_takes_the_rows_of_a_list_given_to_it() -> None:
    """The index builder hands its own list over: emptied as it is compressed, a large
    catalog is never held twice."""
    rows = [(b"b", "x:2"), (b"a", "x:1")]
    catalog = Catalog.build(rows, 1)
    assert rows == [] and list(catalog.items()) == [(b"a", "x:1"), (b"b", "x:2")]


def test_an_empty_catalog_finds_nothing() -> None:
    assert EMPTY.nearest(b'{"a":1}') is None and list(EMPTY.items()) == []


def chat(text: str) -> dict[str, Any]:
    return {"kind": "chat", "messages": [
        {"role": "system", "content": "You are a careful assistant. " * 20},
        {"role": "user", "content": text}]}


def test_realistic_prompts_across_many_blocks() -> None:
    """Prompts sharing a long system message, enough of them to train a dictionary: every
    saved prompt is found as itself, and near misses find what the plain list finds."""
    saved = [(orjson.dumps(chat(f"Question {i}: what is {i * 7}?")), f"run.jsonl:{i + 1}")
             for i in range(1200)]
    plain = PlainCatalog(saved)
    catalog = Catalog.build(list(saved))
    assert catalog._dictionary is not None
    assert len(catalog._blocks) * 10 < sum(len(p) for p, _ in saved)
    for prompt, where in saved:
        assert catalog.nearest(prompt) == (orjson.loads(prompt), where)
    for i in range(0, 1200, 7):
        for asked in (f"Question {i}: what is {i * 7}?!", f"Question {i}: what", f"Q {i}"):
            canonical = orjson.dumps(chat(asked))
            assert catalog.nearest_saved(canonical) == plain.nearest_saved(canonical)
    assert list(catalog.items()) == sorted(saved)


def test_prompts_too_small_to_train_on_are_compressed_without_a_dictionary() -> None:
    """zstd refuses to train on empty samples: the blocks are then compressed alone."""
    saved = [(b"", f"run.jsonl:{i + 1}") for i in range(1500)]
    catalog = Catalog.build(list(saved))
    assert catalog._dictionary is None
    plain = PlainCatalog(saved)
    for canonical in (b"", b"a", b"ab", b"b", b"c", b"d"):
        assert catalog.nearest_saved(canonical) == plain.nearest_saved(canonical)
    assert list(catalog.items()) == sorted(saved)


@settings(max_examples=100, deadline=None)
@given(saved_rows, st.integers(1, 5), st.integers(1, 4), st.integers(1, 7))
def test_blocks_compressed_in_threads_are_the_frames_compressed_one_at_a_time(
        saved: list[tuple[bytes, str]], size: int, threads: int, batch: int) -> None:
    """A large catalog compresses its blocks a batch at a time, in threads: the same
    frames, in the same order, as a small one compressing them one by one."""
    alone = Catalog.build(list(saved), size)
    with mock.patch.object(nearest, "_MANY", 1), mock.patch.object(nearest, "_BATCH", batch), \
            mock.patch.object(nearest, "_THREADS", threads):
        threaded = Catalog.build(list(saved), size)
    assert threaded._blocks == alone._blocks and threaded._ends == alone._ends
    assert list(threaded.items()) == sorted(saved)


def test_a_large_catalog_with_a_dictionary_compresses_in_threads_as_one_at_a_time() -> None:
    saved = [(orjson.dumps(chat(f"Question {i}: what is {i * 7}?")), f"run.jsonl:{i + 1}")
             for i in range(1200)]
    threaded = Catalog.build(list(saved))
    assert len(threaded._ends) >= nearest._MANY
    with mock.patch.object(nearest, "_MANY", len(saved)):
        alone = Catalog.build(list(saved))
    assert threaded._blocks == alone._blocks and threaded._ends == alone._ends


@settings(max_examples=200, deadline=None)
@given(saved_rows, st.lists(prompts, min_size=1, max_size=8))
def test_the_sorted_catalog_lists_and_finds_what_the_compressed_one_does(
        saved: list[tuple[bytes, str]], asked: list[bytes]) -> None:
    """`replay-server index` writes the prompts of an uncompressed catalog: the same rows
    in the same order, and the same nearest prompt for any request."""
    compressed, plain = Catalog.build(list(saved)), PlainCatalog(saved)
    held = SortedCatalog(iter(saved))
    assert list(held.items()) == list(compressed.items()) == sorted(saved)
    assert len(held) == len(saved)
    for canonical in asked + [p for p, _ in saved[:8]]:
        assert held.nearest_saved(canonical) == plain.nearest_saved(canonical)
