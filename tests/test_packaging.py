"""What the package says about itself: one version everywhere, its license, its types."""

from __future__ import annotations

import re
import subprocess
from importlib import metadata
from pathlib import Path

import replay_server
from replay_server.saved.writer import RecordWriter
from replay_server.settings import Settings
from replay_server.web.app import create_app
from replay_server.web.recorder import Recorder, create_record_app
from tests.support import CLI, ROOT, build

VERSION = replay_server.__version__


def test_one_version_everywhere(tmp_path: Path) -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    assert metadata.version("replay-server") == VERSION  # pyproject reads it from there
    assert create_app(Settings(), build([])).openapi()["info"]["version"] == VERSION
    writer = RecordWriter(tmp_path / "run.jsonl")
    try:
        recorder = create_record_app(Recorder("http://127.0.0.1:9", writer))
        assert recorder.openapi()["info"]["version"] == VERSION
    finally:
        writer.close()
    shown = subprocess.run([*CLI, "--version"], capture_output=True, text=True, check=True)
    assert shown.stdout == f"replay-server, version {VERSION}\n"


def test_the_changelog_s_latest_release_is_this_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M)
    assert released and released[0] == VERSION


def test_license_and_types_are_declared() -> None:
    meta = metadata.metadata("replay-server")
    assert meta["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (meta.get_all("License-File") or [])
    assert (ROOT / "LICENSE").read_text().split()[:3] == ["Apache", "License", "Version"]
    assert "Typing :: Typed" in (meta.get_all("Classifier") or [])
    assert (Path(replay_server.__file__).parent / "py.typed").is_file()


def test_a_fresh_clone_holds_no_symlink_and_nothing_ignored() -> None:
    """A clone must work on any machine: a tracked symlink (a `.venv` pointing into one
    machine's checkout) breaks `make` there, and a tracked file that .gitignore ignores is
    one somebody added by mistake."""
    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.splitlines()
    assert [line for line in tracked if line.startswith("120000 ")] == []
    ignored = subprocess.run(["git", "ls-files", "-ci", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    assert ignored == ""
