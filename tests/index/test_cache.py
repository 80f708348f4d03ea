"""The index cache: saved files are served through an index built once and kept; a run
served before opens it again, never a stale one (a changed file is indexed again)."""

from __future__ import annotations

import gc
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai import OpenAI

from replay_server.errors import LoadError
from replay_server.index import cache
from replay_server.index.cache import Options, open_cached
from replay_server.index.cache_folder import Cleared, clear, entries
from replay_server.index.loading import load
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
    gc.collect()  # the server's index freed, as at the end of its process: no longer held
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


def test_nowhere_to_write_the_index_is_an_error_that_says_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A container with a read-only root and no volume for the cache: neither the cache
    nor a temporary folder can be written. A LoadError (exit 2) naming the fix, not
    Python's `No usable temporary directory found`."""
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("REPLAY_SERVER_CACHE", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a-file" / "tmp"))
    saved = _saved(tmp_path / "run.jsonl", ("q", "a"))
    with pytest.raises(LoadError) as raised:
        open_cached([saved], Options())
    said = str(raised.value)
    assert "there is nowhere to write it" in said and "cannot be written" in said
    assert "set REPLAY_SERVER_CACHE to a folder that can be written" in said


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


def test_entries_list_what_each_was_built_from(tmp_path: Path) -> None:
    saved = _saved(tmp_path / "run.jsonl", ("q", "a"))
    before = time.time()
    served = open_cached([saved], Options())
    [entry] = entries()
    assert entry.inputs == [str(saved)] and entry.size == entry.path.stat().st_size
    assert entry.built is not None and before - 1 <= entry.built <= time.time()
    assert clear() == Cleared(0, 0, 0, 1) and entries() == [entry]  # kept: served
    del served  # (the index closed: its lock goes with it)
    gc.collect()
    assert clear() == Cleared(1, 0, entry.size, 0) and entries() == []


def test_the_environment_the_readers_read_is_in_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """lm-eval's null-answer placeholder can be set in the environment: the same files
    under another value are another load (an answer then, unusable now), never the
    index of the first."""
    from tests.saved.formats.test_lm_eval import copy_case, rewrite

    def answered(lines: list[dict[str, Any]]) -> None:
        for row in lines:
            if row["doc_id"] == 0:
                row["resps"][0][0] = "N/A"

    runs = tmp_path / "runs"
    runs.mkdir()
    rewrite(copy_case("chat_repeats", runs), answered)
    monkeypatch.delenv("LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER", raising=False)
    assert open_cached([runs], Options()).index.models["tiny-model"].unusable_records == 0
    monkeypatch.setenv("LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER", "N/A")
    again = open_cached([runs], Options())
    assert again.index.models["tiny-model"].unusable_records == 1
    assert "indexed before" not in again.report[0]


@pytest.mark.http
def test_a_file_changed_while_it_is_loaded_then_changed_back_is_never_served_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that rewrites the file between its digest and its load, keeping its size
    and mtime (`cp -p`, rsync), then puts the old bytes back: the index of what was
    loaded must not be kept under the old bytes' name."""
    saved = _saved(tmp_path / "run.jsonl", ("q", "old"))
    old, before = saved.read_bytes(), saved.stat()

    def keep_stamps() -> None:
        os.utime(saved, ns=(before.st_atime_ns, before.st_mtime_ns))

    def rewritten_then_loaded(*args: Any, **kwargs: Any) -> Any:
        _saved(saved, ("q", "new"))
        keep_stamps()
        return load(*args, **kwargs)

    monkeypatch.setattr(cache, "load", rewritten_then_loaded)
    during = open_cached([saved], Options())
    assert "changed while they were read" in during.report[0]
    during.index.db.close()
    monkeypatch.setattr(cache, "load", load)
    saved.write_bytes(old)
    keep_stamps()
    assert _answer([saved], "q") == "old"


@pytest.mark.slow
def test_other_reader_code_of_the_same_version_is_another_index(tmp_path: Path) -> None:
    """An editable install whose reader changed keeps its version string: the index the
    old code built is not served by the new (a copy of the package, one reader edited,
    imported by a process of its own)."""
    import shutil
    import subprocess
    import sys

    import replay_server
    saved = _saved(tmp_path / "run.jsonl", ("q", "a"))
    copy = tmp_path / "code"
    shutil.copytree(Path(replay_server.__file__).parent, copy / "replay_server",
                    ignore=shutil.ignore_patterns("__pycache__"))
    said = ("from replay_server.index.cache import Options, open_cached; import sys; "
            "print(open_cached([sys.argv[1]], Options()).report[0])")

    def first_line(code: Path | None) -> str:
        env = {**os.environ, "PYTHONPATH": str(code)} if code else dict(os.environ)
        return subprocess.run([sys.executable, "-c", said, str(saved)], env=env, text=True,
                              capture_output=True, check=True, timeout=60,
                              cwd=tmp_path).stdout  # (not this checkout's package)
    assert first_line(copy).startswith("replay-server: indexed into the cache: ")
    assert first_line(copy).startswith("replay-server: these files were indexed before")
    reader = copy / "replay_server" / "saved" / "formats" / "native.py"
    reader.write_text(reader.read_text() + "\n# changed\n")
    assert first_line(copy).startswith("replay-server: indexed into the cache: ")


@pytest.mark.parametrize("given", ["tokenizer.json", "its folder"])
def test_the_tokenizer_is_keyed_on_the_files_it_is_read_from(tmp_path: Path,
                                                             given: str) -> None:
    """A tokenizer given as its tokenizer.json is read with the config beside it: a
    changed config is another index. A file the tokenizer is not read from (a model's
    weights in the same snapshot folder) is neither digested nor another index."""
    import shutil
    folder = tmp_path / "tokenizer"
    shutil.copytree(Path(__file__).parents[1] / "data" / "gen" / "tokenizer", folder)
    options = Options(tokenizer=str(folder / "tokenizer.json" if given != "its folder"
                                    else folder))
    saved = _saved(tmp_path / "run.jsonl", ("q", "a"))
    first = open_cached([saved], options).index.path
    (folder / "model.safetensors").write_bytes(b"weights")
    assert open_cached([saved], options).index.path == first
    config = folder / "tokenizer_config.json"
    config.write_bytes(orjson.dumps({**orjson.loads(config.read_bytes()), "bos_token": "x"}))
    assert "indexed before" not in open_cached([saved], options).report[0]


@pytest.mark.http
def test_an_entry_is_served_only_under_the_name_it_was_built_for(tmp_path: Path) -> None:
    """An entry copied or linked over another's name (a synced cache, a hand's slip) is
    another run's index: it is refused and built again, never served."""
    one = _saved(tmp_path / "one.jsonl", ("q", "one"))
    two = _saved(tmp_path / "two.jsonl", ("q", "two"))
    first, second = (open_cached([p], Options()) for p in (one, two))
    first.index.db.close()
    second.index.db.close()
    first.index.path.replace(second.index.path)
    again = open_cached([two], Options())
    assert "cannot be used (it was built for other files" in again.report[0]
    again.index.db.close()
    second.index.path.unlink()
    second.index.path.symlink_to(first.index.path)  # (built again just above)
    assert _answer([two], "q") == "two"


def test_a_cache_inside_the_served_folder_still_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve .` where REPLAY_SERVER_CACHE is `./.cache`: an index is never written into
    a folder of saved runs that is read, so it is built into a temporary file and said,
    not refused after the whole load as if the user had asked to write it there."""
    monkeypatch.setenv("REPLAY_SERVER_CACHE", str(tmp_path / ".cache"))
    _saved(tmp_path / "run.jsonl", ("q", "a"))
    opened = open_cached([tmp_path], Options())
    assert opened.report[0].startswith(f"replay-server: the cache {tmp_path}/.cache/indexes "
                                       f"is inside {tmp_path}, a directory of saved runs "
                                       "that is read: the index is built into ")
    assert opened.report[1].startswith("loaded 1 saved exchanges")
    assert not (tmp_path / ".cache" / "indexes").exists()
    opened.index.db.close()
    opened.index.path.unlink()  # (what the end of the process does)
