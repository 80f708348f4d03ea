"""docs/compare.md shows what compare does: its example of flips is run here (the port
certification recipe, which needs the harnesses, is run in test_harness_runs.py)."""

from __future__ import annotations

import shlex

import pytest
from click.testing import CliRunner

from replay_server.cli import main

from .support import DATA, docs_block


def test_the_flips_example_prints_what_the_page_shows(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    [command] = docs_block("recipe", "flips").splitlines()
    args = shlex.split(command)
    assert args[:2] == ["replay-server", "compare"]
    monkeypatch.chdir(DATA.parent.parent)  # the repository, where the page's paths start
    result = CliRunner().invoke(main, args[1:])
    assert result.exit_code == 1, result.output
    assert result.stdout == docs_block("output", "flips")
