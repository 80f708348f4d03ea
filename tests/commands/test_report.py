"""What `replay-server run` reports: the places of saved samples never asked for, and what
the report says when the index they are listed from is damaged."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_never_asked_for_examples_name_each_place_once_with_its_unused_samples() -> None:
    """An lm-eval samples line holds a doc's 3 repeats: one place, 3 samples."""
    from replay_server.commands.report import report
    from replay_server.commands.serve import open_run
    from replay_server.settings import Settings
    from replay_server.web.app import create_app

    opened = open_run([ROOT / "tests/data/lm_eval/chat_repeats/tiny-model"], Settings())
    replayer = create_app(Settings(), opened.index).state.replayer
    endpoint, model, prompt = opened.examples[0]
    replayer.handle(endpoint, json.dumps({"model": model, **prompt}).encode())
    shown = next(line for line in report(replayer) if line.startswith("    e.g. "))
    places = shown.removeprefix("    e.g. ").split("; ")
    assert len(places) == 5
    assert len({place.rsplit(": ", 1)[0] for place in places}) == 5
    first = places[0]
    assert first.startswith(str(ROOT / "tests/data/lm_eval/chat_repeats/"))
    assert ".jsonl:1 (" in first
    assert first.endswith(": 2 of 3") and all(p.endswith(": 3 of 3") for p in places[1:])


def test_the_report_of_a_damaged_index_says_what_it_cannot_list(tmp_path: Path) -> None:
    """Its never-asked-for samples are listed from the index: where it is damaged, the
    report says so instead of failing (the verdict fails the run on them anyway)."""
    from replay_server.commands.report import report
    from replay_server.commands.run import verdict
    from replay_server.commands.serve import open_run
    from replay_server.settings import Settings
    from replay_server.web.app import create_app
    from tests.support import damaged_index

    opened = open_run([damaged_index(tmp_path, "an answer's bytes")], Settings())
    replayer = create_app(Settings(), opened.index).state.replayer
    lines = report(replayer)
    assert "saved samples never asked for: 120" in "\n".join(lines)
    assert any("is damaged (a saved value fails its checksum)" in line for line in lines)
    assert verdict(replayer, 0, allow_unused=False)[0] == 5  # no request reached it
