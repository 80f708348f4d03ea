"""replay/state/journal.py: the run's shape, which names the default prefix, is the same
for every replica of one run, however it loaded it, and differs between runs."""

from __future__ import annotations

from pathlib import Path

from replay_server.index import file as index_file
from replay_server.index.loading import load
from replay_server.replay.state.journal import shape_digest
from tests.support import chat_record, chat_response, write_jsonl


def test_a_run_loaded_or_from_its_index_file_has_one_shape(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", [chat_record("q", chat_response("1", "2"))])
    loaded = load([path], progress=False)
    index_file.write(loaded, tmp_path / "run.idx")
    stored = index_file.StoredIndex(tmp_path / "run.idx")
    try:
        assert shape_digest(stored) == shape_digest(load([path], progress=False).index)
    finally:
        stored.db.close()


def test_two_seeds_of_one_run_have_two_shapes(tmp_path: Path) -> None:
    one = write_jsonl(tmp_path / "one.jsonl", [chat_record("q", chat_response("1", "2"))])
    two = write_jsonl(tmp_path / "two.jsonl", [chat_record("q", chat_response("a", "b"))])
    assert shape_digest(load([one], progress=False).index) != \
        shape_digest(load([two], progress=False).index)
