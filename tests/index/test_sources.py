"""What an index file was built from, by absolute path: a stale index refused, its
sources never written over, from whatever folder the commands run in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replay_server.commands.serve import open_run
from replay_server.errors import LoadError
from replay_server.index import file as index_file
from replay_server.index import sources
from replay_server.index.file import StoredIndex
from replay_server.index.loading import load
from replay_server.settings import Settings
from tests.support import chat_record, chat_response, write_jsonl


def indexed_in_its_folder(folder: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Path:
    """An index built in `folder` from paths relative to it (`index run.jsonl -o run.idx`
    run there), the way a user builds one; the test then goes back to where it was."""
    with monkeypatch.context() as m:
        m.chdir(folder)
        index_file.write(load(list(args), progress=False), Path("run.idx"))
    return folder / "run.idx"


def test_a_changed_source_is_found_from_any_folder(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "A").mkdir()
    saved = write_jsonl(tmp_path / "A" / "run.jsonl", [chat_record("q", chat_response("a"))])
    index = indexed_in_its_folder(tmp_path / "A", monkeypatch, "run.jsonl")
    monkeypatch.chdir(tmp_path)
    assert StoredIndex(index).sources.stale() == []
    saved.write_bytes(saved.read_bytes() + b"\n")  # re-recorded
    assert StoredIndex(index).sources.stale() == [f"{saved} (changed)"]
    monkeypatch.chdir(tmp_path / "A")
    assert StoredIndex(index).sources.stale() == [f"{saved} (changed)"]


def test_a_source_rewritten_to_its_size_and_mtime_is_found_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Size and mtime can be copied (`cp -p`, `touch -r`, rsync): an index file checks
    its saved files' content too, as the index cache does (one identity of a file)."""
    saved = write_jsonl(tmp_path / "run.jsonl", [chat_record("q", chat_response("a"))])
    index = indexed_in_its_folder(tmp_path, monkeypatch, "run.jsonl")
    before = saved.stat()
    saved.write_bytes(saved.read_bytes().replace(b'"a"', b'"b"'))
    os.utime(saved, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert saved.stat().st_size == before.st_size
    assert StoredIndex(index).sources.stale() == [f"{saved} (changed)"]


def test_serving_a_stale_index_is_refused_with_the_command_to_rebuild_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its answers may be the old ones: never served quietly, wherever serve runs."""
    (tmp_path / "A").mkdir()
    saved = write_jsonl(tmp_path / "A" / "run.jsonl", [chat_record("q", chat_response("a"))])
    index = indexed_in_its_folder(tmp_path / "A", monkeypatch, "run.jsonl")
    monkeypatch.chdir(tmp_path)
    open_run([Path("A/run.idx")], Settings())
    write_jsonl(saved, [chat_record("q", chat_response("b"))])
    with pytest.raises(LoadError) as refused:
        open_run([Path("A/run.idx")], Settings())
    message = str(refused.value)
    assert f"{saved} (changed)" in message
    assert f"replay-server index {saved} -o {index}" in message


def test_a_file_new_in_or_gone_from_an_indexed_folder_makes_it_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Serving the folder would read the new file (or no longer the gone one)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    first = write_jsonl(runs / "a.jsonl", [chat_record("q", chat_response("a"))])
    index = indexed_in_its_folder(tmp_path, monkeypatch, "runs")
    assert StoredIndex(index).sources.stale() == []
    added = write_jsonl(runs / "b.jsonl", [chat_record("q", chat_response("b"))])
    assert StoredIndex(index).sources.stale() == [f"{added} (new)"]
    first.unlink()
    assert StoredIndex(index).sources.stale() == [f"{first} (gone)", f"{added} (new)"]


def test_the_sources_of_an_index_are_inputs_from_any_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No output replaces a saved file the index was built from, nor lands in a folder of
    them, whatever folder the command runs in."""
    (tmp_path / "A" / "runs").mkdir(parents=True)
    write_jsonl(tmp_path / "A" / "run.jsonl", [chat_record("q", chat_response("a"))])
    write_jsonl(tmp_path / "A" / "runs" / "b.jsonl", [chat_record("r", chat_response("b"))])
    indexed_in_its_folder(tmp_path / "A", monkeypatch, "run.jsonl", "runs")
    monkeypatch.chdir(tmp_path)
    inputs = open_run([Path("A/run.idx")], Settings()).inputs
    for out in ("A/run.jsonl", "A/run.idx", "A/runs/report.jsonl"):
        with pytest.raises(LoadError):
            inputs.refuse_output(Path(out))
    inputs.refuse_output(Path("A/report.jsonl"))


def test_an_index_whose_saved_files_are_not_here_is_served_saying_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Copied to another machine: what it was built from cannot be checked."""
    (tmp_path / "A").mkdir()
    saved = write_jsonl(tmp_path / "A" / "run.jsonl", [chat_record("q", chat_response("a"))])
    index = indexed_in_its_folder(tmp_path / "A", monkeypatch, "run.jsonl")
    saved.unlink()
    assert StoredIndex(index).sources.stale() == []
    report = open_run([index], Settings()).report
    assert f"1 saved file(s) the index was built from are not here (e.g. {saved})" in report[-1]


def test_a_file_of_an_indexed_folder_that_a_load_now_reads_makes_it_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file the index did not read (empty when it was built: a recording just begun)
    that now holds saved exchanges: serving the folder would read it, so the index is
    stale, though the file was there before. A file still unread is no change."""
    runs = tmp_path / "runs"
    runs.mkdir()
    write_jsonl(runs / "a.jsonl", [chat_record("q", chat_response("a"))])
    begun = runs / "b.jsonl"
    begun.touch()
    (runs / "notes.txt").write_text("what this run is\n")
    index = indexed_in_its_folder(tmp_path, monkeypatch, "runs")
    assert StoredIndex(index).sources.stale() == []
    write_jsonl(begun, [chat_record("q", chat_response("b"))])
    (runs / "notes.txt").write_text("what this run is, and more\n")
    assert StoredIndex(index).sources.stale() == [f"{begun} (new)"]


def test_sources_given_up_from_a_folder_since_removed_are_still_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`index ../runs` run in a build folder that is then removed: its sources were kept as
    `BUILD/../runs/...`, which no longer names anything, so a changed source was served
    stale with a warning that the files are not here."""
    runs, build = tmp_path / "runs", tmp_path / "build"
    runs.mkdir()
    build.mkdir()
    saved = write_jsonl(runs / "a.jsonl", [chat_record("q", chat_response("a"))])
    alone = write_jsonl(tmp_path / "b.jsonl", [chat_record("r", chat_response("a"))])
    with monkeypatch.context() as m:
        m.chdir(build)
        index_file.write(load(["../runs", "../b.jsonl"], progress=False), Path("../run.idx"))
    build.rmdir()
    for path, prompt in ((saved, "q"), (alone, "r")):
        write_jsonl(path, [chat_record(prompt, chat_response("b"))])
    sources = StoredIndex(tmp_path / "run.idx").sources
    assert sources.missing() == []
    assert sources.stale() == [f"{saved} (changed)", f"{alone} (changed)"]
    assert f"replay-server index {runs} {alone} -o" in str(pytest.raises(
        LoadError, sources.refuse_stale).value)


def test_a_source_gone_while_others_are_here_makes_it_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only an index whose saved files are all elsewhere (copied to another machine) is
    served without them; one deleted beside others still here is a change: serving the
    same arguments would no longer load its answers."""
    for name in ("A", "B"):
        (tmp_path / name).mkdir()
    first = write_jsonl(tmp_path / "A" / "run.jsonl", [chat_record("q", chat_response("a"))])
    write_jsonl(tmp_path / "B" / "x.jsonl", [chat_record("r", chat_response("b"))])
    index = indexed_in_its_folder(tmp_path, monkeypatch, "A/run.jsonl", "B/x.jsonl")
    first.unlink()
    assert StoredIndex(index).sources.stale() == [f"{first} (gone)"]
    with pytest.raises(LoadError, match="gone"):
        open_run([index], Settings())


def test_the_digest_reads_the_whole_file(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.write_bytes(b"a" * 5_000_000 + b"b")
    two.write_bytes(b"a" * 5_000_000 + b"c")
    (tmp_path / "empty").write_bytes(b"")
    assert sources.digest(one) != sources.digest(two)
    assert sources.digest(tmp_path / "empty") != sources.digest(one)
