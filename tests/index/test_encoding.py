"""A saved answer as index-file bytes: sealed, so that a damaged one is told."""

from __future__ import annotations

import pytest

from replay_server.index.encoding import Damaged, seal, unseal


def test_a_sealed_value_comes_back_as_it_was() -> None:
    for value in (b"", b"x", b'{"choices": []}' * 100):
        assert unseal(seal(value)) == value


def test_any_damaged_byte_or_a_cut_seal_is_told() -> None:
    sealed = seal(b'{"content": "The answer is 4."}')
    for at in range(len(sealed)):
        damaged = bytearray(sealed)
        damaged[at] ^= 0x20
        with pytest.raises(Damaged):
            unseal(bytes(damaged))
    for cut in (b"", sealed[:3], sealed[:-1]):
        with pytest.raises(Damaged):
            unseal(cut)
