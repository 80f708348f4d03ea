"""The batch protocols' shared shapes as pure functions: a list's pages, both ways."""

from __future__ import annotations

from replay_server.wire.batches.job import page

IDS = ["e", "d", "c", "b", "a"]  # newest first


def test_pages_go_after_and_before_an_id() -> None:
    assert page(IDS, IDS, 2) == (["e", "d"], True)
    assert page(IDS, IDS, 2, after="d") == (["c", "b"], True)
    assert page(IDS, IDS, 2, after="b") == (["a"], False)
    assert page(IDS, IDS, 2, before="b") == (["d", "c"], True)
    assert page(IDS, IDS, 2, before="d") == (["e"], False)
    assert page(IDS, IDS, 2, after="zz") == ([], False)

