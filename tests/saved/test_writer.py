"""How commands write files: whole (convert's JSONL, the index file) or by durable appends
(the recorder), each with the usual mode of a new file (0666 less the umask)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from replay_server.commands.convert import convert_paths
from replay_server.index import file as index_file
from replay_server.index.loading import load
from replay_server.saved.writer import RecordWriter, written_whole
from tests.support import chat_record, chat_response, write_jsonl


@pytest.fixture
def umask() -> Iterator[int]:
    """A umask that leaves the group its write bit: a mode fixed by the code (0600, 0644)
    shows, the usual one (0664) too."""
    old = os.umask(0o002)
    try:
        yield 0o002
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def saved(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "run.jsonl", [chat_record("q", chat_response("a"))])


def test_every_output_gets_the_usual_mode(tmp_path: Path, umask: int) -> None:
    run = saved(tmp_path)
    convert_paths([run], tmp_path / "converted.jsonl", progress=False)
    index_file.write(load([run], progress=False), tmp_path / "run.index")
    RecordWriter(tmp_path / "recorded.jsonl").close()
    usual = 0o666 & ~umask
    assert {p.name: mode(p) for p in tmp_path.iterdir() if p != run} == {
        "converted.jsonl": usual, "run.index": usual, "recorded.jsonl": usual}


def test_a_file_written_whole_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    with written_whole(out) as tmp:
        tmp.write_text("new\n")
        assert out.read_text() == "old\n" and tmp.parent == tmp_path
    assert out.read_text() == "new\n"
    with pytest.raises(RuntimeError), written_whole(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the writer failed")
    assert out.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_a_symlinked_output_replaces_the_file_it_points_to(tmp_path: Path) -> None:
    (tmp_path / "real.jsonl").write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to("real.jsonl")
    with written_whole(link) as tmp:
        tmp.write_text("new\n")
    assert link.is_symlink() and (tmp_path / "real.jsonl").read_text() == "new\n"


def test_a_pipe_is_never_replaced_by_a_file_written_whole(tmp_path: Path) -> None:
    """Renaming the new file over a pipe (or a device: /dev/null) would replace the node."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(OSError, match="is a pipe, not a regular file"), written_whole(pipe):
        pass
    assert stat.S_ISFIFO(pipe.lstat().st_mode) and [p.name for p in tmp_path.iterdir()] == \
        ["pipe"]
