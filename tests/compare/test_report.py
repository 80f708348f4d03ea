"""`run --report`'s `sources`: which saved instances hold each answered prompt."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from replay_server.replay import Replayer
from replay_server.runner import write_report
from replay_server.samples import Rules

from ..support import MODEL, build, chat_record, chat_response, user


def _report(tmp_path: Path, *asked: str) -> Path:
    """A report of a replay of two docs that share one prompt and one greedy answer, and a
    third with a prompt of its own, after `asked` requests."""
    index = build([chat_record("2+2?", chat_response("4"), instance="t:0", line=1),
                   chat_record("2+2?", chat_response("4"), instance="t:1", line=2),
                   chat_record("3+3?", chat_response("6"), instance="t:2", line=3)])
    replayer = Replayer(index, Rules())
    replayer.stats.tracked = {}
    for text in asked:
        replayer.handle("/v1/chat/completions",
                        orjson.dumps({"model": MODEL, "messages": user(text)}))
    path = tmp_path / "report.jsonl"
    write_report(path, replayer)
    return path


def test_a_report_line_names_every_saved_instance_that_holds_its_prompt(tmp_path: Path
                                                                        ) -> None:
    path = _report(tmp_path, "2+2?", "2+2?", "3+3?")
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    by_instances = {tuple(s["instance"] for s in line["sources"]): line for line in lines}
    assert set(by_instances) == {("t:0", "t:1"), ("t:2",)}
    shared = by_instances[("t:0", "t:1")]
    assert shared["attempts"] == 2 and shared["served"] == ["saved.jsonl:1 (t:0)"] * 2
    assert [s["file"] for s in shared["sources"]] == [os.path.abspath("saved.jsonl")] * 2
    assert [s["line"] for s in shared["sources"]] == [1, 2]
