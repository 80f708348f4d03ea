"""Which files a load reads (`loader.plan`), and the one rule every output of every
command keeps: it never writes over one of its inputs (`Plan.refuse_output`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replay_server.errors import LoadError
from replay_server.saved.formats import READERS, LoadContext
from replay_server.saved.loader import Plan, plan
from tests.support import chat_record, chat_response, write_jsonl


def saved(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_jsonl(path, [chat_record("q", chat_response("a"))])


def refused(planned: Plan, out: Path) -> str:
    with pytest.raises(LoadError) as caught:
        planned.refuse_output(out)
    return str(caught.value)


def test_an_input_file_is_refused_by_any_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    run = saved(tmp_path / "runs" / "run.jsonl")
    planned = plan([run])
    assert "is one of the inputs" in refused(planned, run)
    assert "is one of the inputs" in refused(planned, tmp_path / "runs" / ".." / "runs" /
                                             "run.jsonl")
    monkeypatch.chdir(tmp_path / "runs")
    assert "is one of the inputs" in refused(planned, Path("run.jsonl"))


def test_a_symlink_to_an_input_or_an_input_that_is_one_is_refused(tmp_path: Path) -> None:
    run = saved(tmp_path / "run.jsonl")
    link = tmp_path / "link.jsonl"
    link.symlink_to(run)
    assert "is one of the inputs" in refused(plan([run]), link)
    assert "is one of the inputs" in refused(plan([link]), run)


def test_a_hard_link_to_an_input_is_refused(tmp_path: Path) -> None:
    run = saved(tmp_path / "run.jsonl")
    os.link(run, tmp_path / "same.jsonl")
    assert "is one of the inputs" in refused(plan([run]), tmp_path / "same.jsonl")


def test_an_output_inside_an_input_directory_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    saved(runs / "a" / "run.jsonl")
    (runs / "notes.txt").write_text("not a saved run: ignored, but still an input's\n")
    elsewhere = tmp_path / "elsewhere"
    saved(elsewhere / "b.jsonl")
    (runs / "b").symlink_to(elsewhere)  # a folder the walk follows is read too
    planned = plan([runs])
    for out in (runs / "report.jsonl", runs / "a" / "new.jsonl", runs / ".hidden" / "x.jsonl",
                elsewhere / "new.jsonl", runs):
        assert "is inside" in refused(planned, out), out
    assert "is one of the inputs" in refused(planned, runs / "notes.txt")  # (it was read)
    assert "is inside" in refused(plan([runs / "a"]), runs / "a" / "run.index")


def test_an_output_beside_the_inputs_is_fine(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = saved(runs / "run.jsonl")
    plan([run]).refuse_output(runs / "converted.jsonl")
    plan([runs]).refuse_output(tmp_path / "converted.jsonl")
    plan([runs]).refuse_output(tmp_path / "runs-converted.jsonl")  # (a prefix, not a folder)


def planned_error(*paths: Path) -> str:
    with pytest.raises(LoadError) as caught:
        plan(paths)
    return str(caught.value)


def test_a_folder_with_nothing_readable_names_each_file_and_why(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("notes\n")
    (tmp_path / "scores.csv").write_text("a,b\n1,2\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "other.jsonl").write_text('{"prompt": "q", "answer": "a"}\n')
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    lines = planned_error(tmp_path).splitlines()
    assert lines[0] == (f"{tmp_path}: no saved generations found in this directory: no "
                        "reader claims any of its files:")
    assert lines[1:6] == [f"  {tmp_path}/{why}" for why in [
        "README.md: not JSON lines, and no reader claims it by its name",
        "empty.jsonl: empty",
        "list.jsonl:1: JSON, but not an object",
        "other.jsonl:1: a JSON object of a shape no reader claims (keys: answer, prompt)",
        "scores.csv: not JSON lines, and no reader claims it by its name"]]
    assert lines[6:] == ["replay-server reads:", *(f"  - {r.expects}" for r in READERS)]


def test_a_jsonl_line_of_no_known_shape_says_which_shapes_are_read(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"prompt": "q", "answer": "a"}\n')
    lines = planned_error(path).splitlines()
    assert lines[0] == (f"{path}:1: not a saved-run format replay-server reads: a JSON object "
                        "of a shape no reader claims (keys: answer, prompt)")
    assert lines[1:] == ["replay-server reads:", *(f"  - {r.expects}" for r in READERS)]
    assert all(key in "\n".join(lines) for key in ("replay_record", "custom_id", "doc_id"))


def test_a_folder_lists_twenty_files_at_most(tmp_path: Path) -> None:
    for i in range(25):
        (tmp_path / f"notes-{i:02}.txt").write_text("notes\n")
    lines = planned_error(tmp_path).splitlines()
    assert lines[20:22] == [f"  {tmp_path}/notes-19.txt: not JSON lines, and no reader "
                            "claims it by its name", "  and 5 more"]


def test_a_saved_run_given_as_a_pipe_is_refused_with_what_to_do(tmp_path: Path) -> None:
    """`serve <(zcat run.jsonl.gz)`: a file is read twice (its first line to detect its
    format, then whole), and a pipe gives its bytes once: the load began mid-line and said
    `not valid JSON`, and a pipe with no writer yet waited for ever. Refused, naming it."""
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(LoadError) as refused:
        plan([fifo])  # (before the fix: blocks here, no writer)
    assert str(refused.value) == (f"{fifo}: a pipe, not a saved file: a saved run is read "
                                  "more than once; save it to a file first")


def test_a_jsonl_file_in_a_folder_whose_first_line_is_no_json_stops_the_load(
        tmp_path: Path) -> None:
    """A damaged saved file (a bad copy, a recorder that crashed on its first line), not
    one of no known format: it was ignored, and the requests it answers got misses, or
    (an OpenAI Batch output) every line of its input `replay_unusable`, `the batch output
    has no line`. Stops the load at FILE:1; --skip-bad-lines reports it and goes on."""
    saved(tmp_path / "a.jsonl")
    cut = tmp_path / "b.jsonl"
    cut.write_text('{"id": "batch_req_1", "custom_id": "request-1", "response": {"status_')
    (tmp_path / "notes.txt").write_text("not a saved run\n")  # no known format: ignored
    error = planned_error(tmp_path)
    assert error == f"{cut}:1: not valid JSON at column 70: unexpected end of data"
    ctx = LoadContext(skip_bad_lines=True)
    planned = plan([tmp_path], ctx)
    assert [p.name for _, p in planned.files] == ["a.jsonl"]
    assert [str(e) for e in ctx.bad_lines] == [error]
    assert [p.name for p in planned.ignored] == ["notes.txt"]


def test_an_index_file_given_where_saved_files_are_read_says_what_it_is(
        tmp_path: Path) -> None:
    """`inspect run.idx`: not "not JSON lines" but what the file is and what to do."""
    from replay_server.index import file as index_file
    from replay_server.index.loading import load

    index = tmp_path / "run.idx"
    index_file.write(load([saved(tmp_path / "run.jsonl")], progress=False), index)
    with pytest.raises(LoadError) as caught:
        plan([index])
    message = str(caught.value)
    assert f"{index}: not a saved-run format" in message
    assert "an index file (written by `replay-server index`)" in message
    assert "give this command the saved files it was built from" in message
