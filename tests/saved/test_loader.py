"""Which files a load reads (`loader.plan`), and the one rule every output of every
command keeps: it never writes over one of its inputs (`Plan.refuse_output`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replay_server.errors import LoadError
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
