"""The index cache: saved files are served through an index built once and kept; a run
served before opens it again, never a stale one (a changed file is indexed again)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai import OpenAI

from replay_server.index import cache
from replay_server.index.cache import Options, entries, open_cached
from replay_server.settings import Settings
from tests.support import chat_record, chat_response, serving, write_jsonl


@pytest.fixture(autouse=True)
def _cache_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLAY_SERVER_CACHE", str(tmp_path / "cache"))


def _saved(path: Path, *answers: tuple[str, str]) -> Path:
    """A saved run of one chat exchange per (question, answer)."""
    return write_jsonl(path, [chat_record(q, chat_response(a), line=i + 1)
                              for i, (q, a) in enumerate(answers)])


def _answer(paths: list[Path], question: str) -> str:
    """What a real server started on `paths` (as `serve` opens them) answers the
    official openai client."""
    with serving(paths, Settings()) as url, \
            OpenAI(base_url=url, api_key="k", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="test/model", messages=[{"role": "user", "content": question}])
    return str(reply.choices[0].message.content)


def _fails(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the saved files were loaded again")


def test_a_second_start_opens_the_index_and_loads_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = _saved(tmp_path / "run.jsonl", ("q", "a"))
    first = open_cached([saved], Options())
    assert first.report[0].startswith("replay-server: indexed into the cache: ")
    monkeypatch.setattr(cache, "load", _fails)
    second = open_cached([saved], Options())
    assert second.report[0].startswith("replay-server: these files were indexed before: "
                                       f"serving the index {first.index.path} (built ")
    assert second.report[1:] == first.report[1:]  # what the load said, again
    assert second.report[1].startswith("loaded 1 saved exchanges (1 prompts)")
    assert second.examples == first.examples and second.examples[0][1] == "test/model"


def test_other_options_are_another_index(tmp_path: Path) -> None:
    saved = _saved(tmp_path / "run.jsonl", ("q", "a"))
    paths = {open_cached([saved], Options()).index.path,
             open_cached([saved], Options(skip_bad_lines=True)).index.path,
             open_cached([saved], Options(max_line=1 << 20)).index.path}
    assert len(paths) == 3


@pytest.mark.http
@pytest.mark.parametrize("change", ["appended", "same size and mtime, other bytes"])
def test_a_changed_file_is_indexed_again_and_its_new_answer_served(
        tmp_path: Path, change: str) -> None:
    saved = _saved(tmp_path / "run.jsonl", ("q", "old"))
    assert _answer([saved], "q") == "old"
    if change == "appended":
        _saved(saved, ("q", "old"), ("q2", "new"))
        assert _answer([saved], "q2") == "new"
    else:  # what `cp -p`, `touch -r` or rsync leave: the size and mtime of the old file
        before = saved.stat()
        _saved(saved, ("q", "new"))
        os.utime(saved, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert saved.stat().st_size == before.st_size
        assert _answer([saved], "q") == "new"
    assert len(entries()) == 1  # the old identity's index is gone with it


@pytest.mark.http
def test_a_file_added_to_a_served_folder_is_loaded(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    _saved(folder / "a.jsonl", ("q", "a"))
    assert _answer([folder], "q") == "a"
    _saved(folder / "b.jsonl", ("q2", "b"))
    assert _answer([folder], "q2") == "b"


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "no load report"])
def test_a_damaged_entry_is_built_again_never_served(tmp_path: Path, damage: str) -> None:
    saved = _saved(tmp_path / "run.jsonl", *[(f"q{i}", "lorem ipsum " * 400)
                                            for i in range(40)])
    entry = open_cached([saved], Options()).index.path
    data = entry.read_bytes()
    if damage == "no load report":  # an index written by `replay-server index`
        from replay_server.index import file, loading
        file.write(loading.load([saved], progress=False), entry)
    else:
        entry.write_bytes({"truncated": data[:len(data) // 2], "garbage": b"x" * 5000,
                           "empty": b""}[damage])
    again = open_cached([saved], Options())
    assert again.report[0].startswith(f"replay-server: the cached index {entry} cannot be "
                                      "used (")
    assert again.report[0].endswith("): building it again")
    assert again.report[1].startswith("replay-server: indexed into the cache: ")
    assert again.index.path == entry and entry.read_bytes() != b"x" * 5000
    assert len(list(again.index.models["test/model"].entries.values())) == 40


def test_a_cache_that_cannot_be_written_still_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("REPLAY_SERVER_CACHE", str(tmp_path / "a-file" / "cache"))
    saved = _saved(tmp_path / "run.jsonl", ("q", "a"))
    opened = open_cached([saved], Options())
    assert opened.report[0].startswith(f"replay-server: the cache {tmp_path}/a-file/cache/"
                                       "indexes cannot be written (")
    assert f"the index is built into {opened.index.path}, removed at exit" in \
        opened.report[0]
    assert opened.index.path.exists() and not str(opened.index.path).startswith(
        str(tmp_path))
    assert opened.report[1].startswith("loaded 1 saved exchanges")
    opened.index.db.close()
    opened.index.path.unlink()  # (what the end of the process does)


def test_skipped_lines_stay_loud_on_a_hit(tmp_path: Path) -> None:
    saved = tmp_path / "run.jsonl"
    _saved(saved, ("q", "a"))
    saved.write_bytes(saved.read_bytes() + b"[1]\n")
    first = open_cached([saved], Options(skip_bad_lines=True))
    second = open_cached([saved], Options(skip_bad_lines=True))
    said = f"  bad line skipped: {saved}:2: expected a JSON object, got a list"
    assert said in first.report and said in second.report
    assert "indexed before" in second.report[0]


def test_the_report_is_sealed_with_the_index(tmp_path: Path) -> None:
    """The kept report is one of the meta rows the index's seal covers: an entry whose
    report was changed is refused, not shown."""
    import sqlite3
    saved = _saved(tmp_path / "run.jsonl", ("q", "a"))
    entry = open_cached([saved], Options()).index.path
    with sqlite3.connect(entry) as db:
        db.execute("UPDATE meta SET value = ? WHERE name = ?",
                   (orjson.dumps(["all is well"]).decode(), cache.REPORT))
    db.close()
    again = open_cached([saved], Options())
    assert "cannot be used (" in again.report[0] and "all is well" not in again.report


def test_the_digest_reads_the_whole_file(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.write_bytes(b"a" * 5_000_000 + b"b")
    two.write_bytes(b"a" * 5_000_000 + b"c")
    (tmp_path / "empty").write_bytes(b"")
    assert cache.digest(one) != cache.digest(two)
    assert cache.digest(tmp_path / "empty") != cache.digest(one)


def test_entries_list_what_each_was_built_from(tmp_path: Path) -> None:
    saved = _saved(tmp_path / "run.jsonl", ("q", "a"))
    before = time.time()
    open_cached([saved], Options())
    [entry] = entries()
    assert entry.inputs == [str(saved)] and entry.size == entry.path.stat().st_size
    assert entry.built is not None and before - 1 <= entry.built <= time.time()
    assert cache.clear() == (1, entry.size) and entries() == []
