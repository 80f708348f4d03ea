"""Saved JSON read with one position in every error: `FILE:LINE`, and the column on that line
(saved/jsonl.py `not_json`), never orjson's own `line 1 column 5 (char 4)` beside it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replay_server.errors import LoadError
from replay_server.index.loading import load
from tests.support import ROOT, chat_record, chat_response

DATA = ROOT / "tests/data"
LINE = orjson.dumps(chat_record("q", chat_response("a")).to_json())


def load_error(path: Path) -> str:
    with pytest.raises(LoadError) as caught:
        load([path], progress=False)
    return str(caught.value)


def test_a_corrupt_line_is_one_position_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(LINE + b'\n{"replay_record": 1,, "model": "m"}\n')
    assert load_error(path) == (f"{path}:2: not valid JSON at column 21: unexpected "
                                "character, expected a string key")


def test_a_cut_last_line_is_one_position_too(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(LINE + b"\n" + LINE[:40])
    assert load_error(path) == (f"{path}:2: the last line is cut short (no newline at the "
                                "end, and not valid JSON at column 41: unexpected end of "
                                "data); was the writer killed?")


@pytest.mark.parametrize("end", [b"\n", b"\r\n"])
def test_a_line_cut_short_inside_the_file_is_its_own_end(tmp_path: Path, end: bytes) -> None:
    """A line cut inside the file (a bad copy, two writers): orjson places the end of data
    after the newline, on a second line, column 1; the line's own column is its end. It
    said `run.jsonl:2: not valid JSON at column 1`, the start of the line."""
    path = tmp_path / "run.jsonl"
    cut = LINE[:LINE.index(b",") + 1]  # `{"replay_record":1,`: outside a string
    path.write_bytes(LINE + end + cut + end + LINE + end)
    assert load_error(path) == (f"{path}:2: not valid JSON at column {len(cut) + 1} (the end "
                                "of the line): unexpected end of data")


def test_a_corrupt_json_file_is_its_line_and_column(tmp_path: Path) -> None:
    """A whole-file JSON (an inspect_ai log): the line in the file, then the column."""
    [source] = (DATA / "inspect_ai/arith_json").glob("*.json")
    lines = source.read_bytes().splitlines(keepends=True)
    lines[9] = lines[9].replace(b'"', b"'", 1)
    path = tmp_path / source.name
    path.write_bytes(b"".join(lines))
    column = len(lines[9]) - len(lines[9].lstrip()) + 1
    assert load_error(path) == (f"{path}:10: not valid JSON at column {column}: unexpected "
                                "character, expected a string key")
