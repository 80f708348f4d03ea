"""The suite's own machinery, where a dependency could break it without a failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MODULE = '''
import os, pathlib, pytest
pytestmark = pytest.mark.xdist_group("one")

@pytest.mark.parametrize("i", range(4))
def test_worker(i):
    pathlib.Path(f"ran-{i}").write_text(os.environ["PYTEST_XDIST_WORKER"])
'''


@pytest.mark.slow
def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    """`make test` runs `--dist loadgroup` so that a module's costly fixtures (the
    container's image, the harnesses' original runs) are made once, by one worker; pytest
    9.2 made xdist drop the groups without a word (pytest-dev/pytest-xdist#1386)."""
    (tmp_path / "test_grouped.py").write_text(MODULE)
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup",
                           "-p", "no:cacheprovider", "-q", "test_grouped.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    workers = [(tmp_path / f"ran-{i}").read_text() for i in range(4)]
    assert len(set(workers)) == 1, workers
