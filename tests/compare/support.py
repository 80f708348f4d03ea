"""Shared by the compare tests: the real harness outputs of tests/data, copies of them to
change one thing in, and the report of a replay of one saved run's requests."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from replay_server.commands.report import write_report
from replay_server.errors import ReplayServerError
from replay_server.index.loading import load
from replay_server.index.samples import Rules
from replay_server.replay.replayer import Replayer
from replay_server.saved.loader import context, plan, read

DATA = Path(__file__).resolve().parents[1] / "data"
LM_EVAL = DATA / "lm_eval"
INSPECT = DATA / "inspect_ai"
EVALSCOPE = DATA / "evalscope"
INSPECT_EVAL = next((INSPECT / "arith").glob("*.eval"))
INSPECT_JSON = next((INSPECT / "arith_json").glob("*.json"))


def samples(case: str) -> Path:
    """The one lm-eval samples file of a case in tests/data/lm_eval."""
    [path] = (LM_EVAL / case).glob("*/samples_*.jsonl")
    return path


def copied_samples(case: str, into: Path) -> Path:
    """A copy of a case's lm-eval run folder (samples and results file: the model name)
    under `into`; its samples file."""
    source = samples(case)
    return copied(source.parent, into) / source.name


def copied(source: Path, into: Path) -> Path:
    """A copy of a saved file or run folder under `into` (keeping its name)."""
    into.mkdir(parents=True, exist_ok=True)
    target = into / source.name
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy(source, target)
    return target


def rewrite_rows(path: Path, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
                 ) -> Path:
    """A JSONL file rewritten in place, row by row, as Python's json writes it (a NaN as
    `NaN`, as lm-eval writes it)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(row) + "\n" for row in change(rows)))
    return path


def replayed(original: Path, rescored: Path, report: Path) -> Path:
    """The `run --report` report of a replay of ORIGINAL that received RESCORED's saved
    requests, in saved order (the real replay service and report writer; no harness, no
    HTTP). A request that gets no saved generation is reported as a miss, as in a run."""
    replayer = Replayer(load([original], progress=False).index, Rules())
    replayer.stats.tracked = {}
    ctx = context()
    for record in read(plan([rescored], ctx), ctx):
        try:
            replayer.handle(record.endpoint, orjson.dumps(record.request))
        except ReplayServerError:
            pass  # counted by the replay service, as when serving: a miss in the report
    write_report(report, replayer)
    return report


DOCS = Path(__file__).resolve().parents[2] / "docs" / "compare.md"


def docs_block(kind: str, name: str) -> str:
    """The fenced block after `<!-- KIND: NAME -->` in docs/compare.md: the commands a
    test runs (`recipe`) or what they print (`output`), as the page shows them."""
    marker = f"<!-- {kind}: {name} -->\n```"
    page = DOCS.read_text(encoding="utf-8")
    assert page.count(marker) == 1, marker
    block = page.split(marker, 1)[1].split("\n", 1)[1]
    return block.split("```\n", 1)[0]
