#!/usr/bin/env python3
"""Regenerate tests/data/recorded/: the saved runs that recipes of docs/ rescore where no
harness's own output fits (a Responses API session, a Claude session, a judge's verdicts,
a deepeval GEval session, a LiteLLM session of Google's Gemini API, a batch job of each
batch API, recorded line by line through the recorder).

    .venv/bin/python tests/data/gen/make_recordings.py    # the project's venv, with the
                                                          # harness extra (make test's)
    .venv/bin/python tests/data/gen/make_recordings.py docs/recipes/google-genai.md
                                                          # only that page's recordings

Each recording is made from the very block of docs/ that rescores it (the blocks that
tests/test_recipes.py runs as pasted), so that the two cannot drift apart. The block's
`replay-server run SAVED... -- COMMAND` runs COMMAND once against the fake model
(tests/fakemodel, which made the rest of the test data), with the variables `run` sets:

- when the recording is the block's only saved path, through `replay-server record`;
- when a saved run stands beside it (the candidate a judge grades), as the first pass of
  docs/judges.md: `replay-server run SAVED --upstream FAKE --out RECORDING -- COMMAND`,
  the candidate replayed and only the judge asked.

deepeval cannot join the project's venv (tests/harnesses/test_judges.py says why), so no
block runs it: its recording is made apart, from the venv of its own that the tests use,
by tests/harnesses/deepeval_geval.py (the candidate and the judge both the fake model),
and docs/recipes/deepeval.md shows what it holds.

The fake model answers deterministically, so running this again writes the same answers
(ids and timestamps differ). Nothing but 127.0.0.1 is contacted.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from replay_server.commands.base_urls import environment  # noqa: E402
from tests.fakemodel.server import create_app as fake_model  # noqa: E402
from tests.harnesses.commands import BIN, DEEPEVAL, REPLAY, offline_env, service  # noqa: E402
from tests.support import runnable_blocks, running, venv_python  # noqa: E402

RECORDED = "tests/data/recorded/"
PAGES = ["docs/recipes/responses-clients.md", "docs/anthropic.md",
         "docs/recipes/google-genai.md", "docs/judges.md", "docs/recipes/openai-litellm.md",
         "docs/recipes/openai-sdk-batch.md", "docs/recipes/anthropic-sdk-batch.md"]
# what the blocks ask the fake model
MODELS = ["tiny-model", "claude-fake", "gemini-fake", "judge-model"]


def command_line(block: str) -> list[str]:
    """The block's one `replay-server run` command, split as sh splits it."""
    argv = shlex.split(block.replace("\\\n", " "), comments=True)
    assert argv[:2] == ["replay-server", "run"] and "--" in argv, block
    return argv


def record(argv: list[str], fake: str, here: Path) -> None:
    """Run the command of `replay-server run ARGV` once, its recording made from the fake."""
    options, command = argv[2:argv.index("--")], argv[argv.index("--") + 1:]
    [recording] = [a for a in options if a.startswith(RECORDED)]
    (REPO / recording).unlink(missing_ok=True)
    saved = [a for a in options if a != recording and (REPO / a).exists()]
    env = offline_env(here)
    env["PATH"] = f"{BIN}:{env['PATH']}"
    if saved:
        rest = [a for a in options if a != recording]
        done = subprocess.run([*REPLAY, "run", *rest, "--upstream", fake, "--out",
                               recording, "--", *command], cwd=here, env=env)
    else:
        names = [options[i + 1] for i, a in enumerate(options) if a == "--base-url-var"]
        with service("record", "--upstream", fake, "--out", str(REPO / recording)) as rec:
            done = subprocess.run(command, cwd=here, env=environment(
                env, rec.url, "replay-server", names))
    assert done.returncode == 0, f"{shlex.join(argv)}: exit status {done.returncode}"


def deepeval(fake: str, here: Path) -> None:
    """deepeval's GEval grading two answers, candidate and judge both recorded."""
    recording = REPO / RECORDED / "deepeval-geval.jsonl"
    recording.unlink(missing_ok=True)
    script = REPO / "tests" / "harnesses" / "deepeval_geval.py"
    env = {**offline_env(here), "DEEPEVAL_TELEMETRY_OPT_OUT": "YES"}
    with service("record", "--upstream", fake, "--out", str(recording)) as rec:
        done = subprocess.run([venv_python("deepeval-venv", DEEPEVAL), str(script),
                               "tiny-model", "judge-model"], cwd=here,
                              env=environment(env, rec.url, "replay-server"))
    assert done.returncode == 0, f"deepeval: exit status {done.returncode}"


def main(pages: list[str]) -> None:
    """Record the blocks of `pages` (of PAGES; none named: every page, and deepeval's)."""
    assert set(pages) <= set(PAGES), f"not a page of recordings: {set(pages) - set(PAGES)}"
    with tempfile.TemporaryDirectory() as tmp, running(fake_model(MODELS)) as fake:
        here = Path(tmp)
        for folder in ("tests", "examples"):  # the blocks' paths, from the repository's root
            (here / folder).symlink_to(REPO / folder)
        for page in pages or PAGES:
            for block in runnable_blocks(REPO / page):
                if RECORDED in block:
                    record(command_line(block), fake, here)
                    print(f"{page}: recorded {block.split(RECORDED)[1].split()[0]}")
        if not pages:
            deepeval(fake, here)


if __name__ == "__main__":
    main(sys.argv[1:])
