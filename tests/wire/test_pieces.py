"""Texts cut into token-sized pieces (`pieces`): the rule is the regex `PIECE`, whitespace
left at the end joining the last piece; `joined_deltas` marks the same cuts."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_server.wire.pieces import first_piece, joined_deltas, split_deltas
from tests.wire.stream_cases import ATOMS, TEXTS

RULE = re.compile(r"\s*(?:\w{1,16}|[^\w\s])")  # the rule, written out: unicode \s and \w
ANY = st.one_of(TEXTS, st.lists(ATOMS, max_size=60).map("".join),
                st.text(st.characters(max_codepoint=0x7f), max_size=60),
                st.text(st.sampled_from(" \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85\xa0.,_aZ9"),
                        max_size=60),
                st.lists(st.sampled_from(["a" * 15, "b" * 16, "c" * 17, " ", ".", "\n"]),
                         max_size=8).map("".join))


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(text=ANY)
def test_pieces_are_those_of_the_rule(text: str) -> None:
    found = RULE.findall(text)
    used = sum(map(len, found))
    expected = found[:-1] + [found[-1] + text[used:]] if found else ([text] if text else [])
    assert split_deltas(text) == expected
    assert first_piece(text) == (expected[0] if expected else "")


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(text=ANY)
def test_pieces_joined_mark_the_same_cuts(text: str) -> None:
    joined = joined_deltas(text)
    if "\x00" in text or "\\u0000" in text:
        assert joined is None
    else:
        assert joined == "\x00".join(split_deltas(text))
