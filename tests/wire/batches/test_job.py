"""The batch protocols' shared shapes as pure functions: a list's pages, both ways."""

from __future__ import annotations

from replay_server.wire.batches.job import page
from replay_server.wire.batches.openai import read_lines

IDS = ["e", "d", "c", "b", "a"]  # newest first


def test_pages_go_after_and_before_an_id() -> None:
    assert page(IDS, IDS, 2) == (["e", "d"], True)
    assert page(IDS, IDS, 2, after="d") == (["c", "b"], True)
    assert page(IDS, IDS, 2, after="b") == (["a"], False)
    assert page(IDS, IDS, 2, before="b") == (["d", "c"], True)
    assert page(IDS, IDS, 2, before="d") == (["e"], False)
    assert page(IDS, IDS, 2, after="zz") == ([], False)


def test_input_lines_keep_their_numbers_and_blank_lines_are_none() -> None:
    data = (b'{"custom_id": "a", "method": "POST", "url": "/v1/completions", '
            b'"body": {"prompt": "p"}}\n\n[1]\n')
    lines, problems = read_lines(data, "/v1/completions")
    assert [(ln.number, ln.custom_id) for ln in lines] == [(1, "a")]
    assert [(p["line"], p["code"]) for p in problems] == [(3, "invalid_request")]
    assert read_lines(b"\n", "/v1/completions")[1][0]["code"] == "empty_file"
