"""`run --report`'s `sources` (which saved instances hold each answered prompt), and
compare's reading of the report."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from replay_server.commands.report import write_report
from replay_server.compare.report import read_report
from replay_server.errors import LoadError
from replay_server.index.samples import Rules
from replay_server.replay.replayer import Replayer
from tests.support import MODEL, build, chat_record, chat_response, user


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


def test_compare_reads_the_report_by_endpoint_and_prompt(tmp_path: Path) -> None:
    report = read_report(_report(tmp_path, "2+2?", "3+3?"))
    assert len(report.lines) == 2
    [line] = [lines[0] for lines in report.lines.values() if len(lines[0].sources) == 1]
    assert line.status == "hit" and str(line.sources[0]).endswith("saved.jsonl:3 (t:2)")


def test_a_request_forwarded_upstream_is_a_report_line_that_compare_reads(
        tmp_path: Path) -> None:
    path = _report(tmp_path, "2+2?")
    replayer = Replayer(build([chat_record("2+2?", chat_response("4"))]), Rules(),
                        upstream_models=())
    replayer.stats.tracked = {}
    body = orjson.dumps({"model": "judge", "messages": user("grade 4")})
    assert replayer.forwards(body) == "judge"
    replayer.forwarded("/v1/chat/completions", body, "judge", "recorded", "")
    write_report(path, replayer)
    (line,) = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert line["status"] == "forwarded" and line["outcomes"] == {"saved": 1}
    (read,) = [lines[0] for lines in read_report(path).lines.values()]
    assert read.status == "forwarded" and read.sources == []


@pytest.mark.parametrize(("text", "error"), [
    ('{"status": "hit", "endpoint": "/v1/chat/completions", "prompt": "ab", "served": []}',
     "report.jsonl:1: field `sources`: missing: which saved instances answered"),
    ('{"status": "maybe", "endpoint": "/v1/chat/completions"}',
     "report.jsonl:1: field `status`: expected \"hit\", \"miss\" or \"forwarded\""),
    ('[1, 2]', "report.jsonl:1: expected a JSON object"),
    ('{"status": "miss", "endpoint": "/v1/chat', "report.jsonl:1: the last line is cut short"),
])
def test_a_bad_report_line_is_named(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "report.jsonl"
    path.write_text(text)
    with pytest.raises(LoadError) as e:
        read_report(path)
    assert str(e.value).startswith(str(tmp_path / error))
