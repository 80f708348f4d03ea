"""Every recipe runs as pasted: each page of docs/recipes/ (and the recipes of
docs/anthropic.md and docs/judges.md) holds a block, marked by its first line, that
rescores a run saved in the repository, and each such block is run here exactly as the
page prints it (read from the page, never copied into the test).

A block runs through `sh -e -c` in a folder holding a copy of the repository's data at
the paths the pages name (so that what it writes lands there, not in the checkout), with
this venv's bin first on PATH (as `source .venv/bin/activate` puts it), offline (every
hub switched off, no proxy), and must exit 0 with each `run` it holds saying
that every request replayed and each `compare` certifying.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harnesses.commands import BIN, DEEPEVAL, offline_env
from tests.support import ROOT, RUNNABLE, VENVS, runnable_blocks, venv_python

RECIPES = ROOT / "docs" / "recipes"
# index.md lists the recipes and says how to run their blocks: it is none itself
PAGES = [*sorted(set(RECIPES.glob("*.md")) - {RECIPES / "index.md"}),
         ROOT / "docs" / "anthropic.md", ROOT / "docs" / "judges.md"]
# all that the blocks may read, at the same paths: the saved runs, and deepeval's script
DATA = ("tests/data", "examples", "tests/harnesses/deepeval_geval.py")
# what a page has the reader install first, outside the block (a venv of its own for a
# harness whose pins clash with the others'): made here the same way, at the same place
DEEPEVAL_VENV = "~/.cache/replay-server/deepeval-venv"
PREPARED = {"deepeval": lambda: venv_python("deepeval-venv", DEEPEVAL)}
REPLAYED = "replay-server run: every request was answered from the saved run"
# blocks that fail for a known bug outside their page, each with why (strict: the mark goes
# when the bug does)
KNOWN_BUGS = {"inspect-ai-3": (
    "wire/gemini keys a functionCall's `id` exactly, and inspect's google/ provider sends "
    "back an id it made up at random for a call the API gave none: the tool sample misses "
    "(tests/harnesses/test_gemini.py)")}


def test_every_recipe_page_holds_a_block_that_runs_as_pasted() -> None:
    """A recipe page opens with one (after its intro), so that a new page cannot skip it;
    the two pages of other topics hold one in their recipes."""
    for page in PAGES:
        assert runnable_blocks(page), f"{page.name}: no block opens with {RUNNABLE!r}"
        if page.parent == RECIPES:
            first = re.search(r"^```\w*\n(.*?)^```$", page.read_text(), re.M | re.S)
            assert first and first[1].startswith(RUNNABLE), f"{page.name}: opens otherwise"
            # it rescores under `run`: listing the saved run is not running the recipe
            assert re.search(r"^replay-server run ", first[1], re.M), \
                f"{page.name}: its block runs nothing under `run`"
    index = (RECIPES / "index.md").read_text()
    assert RUNNABLE in index  # where a reader learns what the marker means
    assert all(f"]({page.name})" in index for page in PAGES if page.parent == RECIPES)


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.parametrize(("page", "block"), [
    pytest.param(page.stem, block, id=f"{page.stem}-{n}", marks=[
        pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[f"{page.stem}-{n}"])]
        if f"{page.stem}-{n}" in KNOWN_BUGS else []) for page in PAGES
    for n, block in enumerate(runnable_blocks(page), 1)])
def test_each_runnable_block_runs_as_pasted(page: str, block: str, tmp_path: Path) -> None:
    if page in PREPARED:
        PREPARED[page]()
    here = tmp_path / "repository"
    for path in DATA:
        if (ROOT / path).is_dir():
            shutil.copytree(ROOT / path, here / path,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (here / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, here / path)
    before = files(here)
    env = offline_env(tmp_path)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["sh", "-e", "-c", block], cwd=here, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    assert done.returncode == 0, done.stdout[-5000:]
    commands = re.findall(r"^replay-server (run|compare) ", block, re.M)
    assert done.stdout.count(REPLAYED) == commands.count("run"), done.stdout[-5000:]
    certified = re.findall(r"^certified: ", done.stdout, re.M)
    assert len(certified) == commands.count("compare"), done.stdout[-5000:]
    assert files(here) == before  # the saved runs and the tasks are read, never written


def files(here: Path) -> set[Path]:
    """Every file of the data under `here`, but the bytecode Python writes beside what it
    imports (lm-eval imports the tasks' data loader)."""
    return {path for folder in DATA for path in [here / folder, *(here / folder).rglob("*")]
            if "__pycache__" not in path.parts}


def test_the_deepeval_page_says_how_to_make_the_venv_its_block_runs() -> None:
    """The venv PREPARED makes for the deepeval block is the one the page has the reader
    make: its place, and the same pinned deepeval."""
    page = (RECIPES / "deepeval.md").read_text()
    assert f"python3 -m venv {DEEPEVAL_VENV}\n" in page
    assert f"{DEEPEVAL_VENV}/bin/pip install {DEEPEVAL}\n" in page
    (block,) = runnable_blocks(RECIPES / "deepeval.md")
    assert f"{DEEPEVAL_VENV}/bin/python " in block
    assert VENVS / "deepeval-venv" == Path(DEEPEVAL_VENV).expanduser()
