"""The index cache's folder: what `replay-server cache --clear` removes, and what it
leaves to the processes using it."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay_server.index.cache_folder import Cleared, clear, indexes_dir, unfinished
from replay_server.saved.writer import written_whole


@pytest.fixture(autouse=True)
def _cache_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLAY_SERVER_CACHE", str(tmp_path / "cache"))


def test_clear_leaves_an_index_being_written() -> None:
    """`--clear` while another start writes its index: the file it is writing is kept
    (removed, its rename failed after the whole load, with a bare 'No such file'), and
    it is not listed as left by a killed start."""
    entry = indexes_dir() / "0-1.idx"
    entry.parent.mkdir(parents=True)
    with written_whole(entry) as tmp:  # (as `file.write` writes an index)
        tmp.write_bytes(b"an index")
        assert clear() == Cleared(0, 0, 0, 0) and tmp.exists()
        assert unfinished() == []
    assert list(entry.parent.iterdir()) == [entry] and entry.read_bytes() == b"an index"
