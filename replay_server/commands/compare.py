"""`replay-server compare ORIGINAL RESCORED`: what the CLI calls.

Reads both sides, pairs them (by identity when both are one harness, else through the
report; `--pair-by` says which), applies `--task` and `--metric`, compares, prints the
table or the JSON, writes the HTML page, and returns the exit status: 0 when every paired
verdict agrees and nothing is unpaired, 1 otherwise. Bad input (a bad file, FILE:LINE; an
option naming a task or metric that is not there; pairing across harnesses without a
report) raises LoadError or ValueError, which the CLI turns into exit status 2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from ..compare import READERS, html, pairing, render
from ..compare.outcome import MetricMap, Outcome, compare
from ..compare.report import read_report
from ..compare.requests import read_requests
from ..compare.sides import Side, read_side
from ..saved.writer import writable, written_whole

PAIR_BY = ("auto", "identity", "report")


def certify(original: str, rescored: str, *, report: Path | None = None,
            metrics: Sequence[str] = (), tasks: Sequence[str] = (), pair_by: str = "auto",
            tokenizer: str | None = None) -> Outcome:
    mine = read_side("ORIGINAL", original, READERS)
    theirs = _renamed(read_side("RESCORED", rescored, READERS), mine, tasks)
    named = _metrics(metrics, mine, theirs)
    saved = read_report(report) if report is not None else None
    how = pair_by if pair_by != "auto" else (
        "identity" if len(mine.harnesses) == 1 and mine.harnesses == theirs.harnesses
        else "report")
    if how == "identity":
        paired = pairing.by_identity(mine, theirs, saved)
    elif saved is None:
        raise ValueError(f"ORIGINAL is {_names(mine)} and RESCORED is {_names(theirs)}: their "
                         "instances are paired through the report of the rescoring (give "
                         "--report FILE, written by `replay-server run ORIGINAL --report FILE "
                         "-- COMMAND`)" if pair_by == "auto" else
                         "--pair-by report needs --report FILE")
    else:
        paired = pairing.by_report(mine, theirs, saved, read_requests([rescored], tokenizer))
    return compare(mine, theirs, paired, named)


def run(original: str, rescored: str, *, report: Path | None, metrics: Sequence[str],
        tasks: Sequence[str], pair_by: str, tokenizer: str | None, as_json: bool,
        html_to: Path | None, echo: Callable[[str], None]) -> int:
    """Compare, print, write the page; the exit status (0 or 1)."""
    if html_to is not None:
        writable(html_to, "--html")
    outcome = certify(original, rescored, report=report, metrics=metrics, tasks=tasks,
                      pair_by=pair_by, tokenizer=tokenizer)
    if html_to is not None:
        with written_whole(html_to) as tmp:
            tmp.write_text(html.page(outcome), encoding="utf-8")
    echo(render.to_json(outcome) if as_json else "\n".join(render.table(outcome)))
    return outcome.status


def _names(side: Side) -> str:
    return " and ".join(sorted(side.harnesses))


def _pairs(specs: Sequence[str], option: str) -> list[tuple[str, str]]:
    found = []
    for spec in specs:
        mine, sep, theirs = spec.partition("=")
        if not mine or (sep and not theirs):
            raise ValueError(f"{option} {spec!r}: expected ORIGINAL=RESCORED or one name")
        found.append((mine, theirs if sep else mine))
    return found


def _renamed(side: Side, original: Side, tasks: Sequence[str]) -> Side:
    """RESCORED with its tasks renamed as --task ORIGINAL=RESCORED says."""
    renames = {theirs: mine for mine, theirs in _pairs(tasks, "--task")}
    for theirs, mine in renames.items():
        if theirs not in side.tasks:
            raise ValueError(f"--task {mine}={theirs}: RESCORED has no task {theirs} "
                             f"(it has: {', '.join(sorted(side.tasks))})")
        if mine not in original.tasks:
            raise ValueError(f"--task {mine}={theirs}: ORIGINAL has no task {mine} "
                             f"(it has: {', '.join(sorted(original.tasks))})")
    if not renames:
        return side
    renamed = Side(side.label, side.path, harnesses=side.harnesses, files=side.files)
    for verdict in side.verdicts.values():
        moved = dataclasses.replace(verdict, task=renames.get(verdict.task, verdict.task))
        if moved.key in renamed.verdicts:
            raise ValueError(f"--task: RESCORED has {moved.task} instance {moved.instance} "
                             "twice once renamed")
        renamed.verdicts[moved.key] = moved
    return renamed


def _metrics(specs: Sequence[str], original: Side, rescored: Side) -> MetricMap | None:
    """--metric ORIGINAL[=RESCORED] pairs, checked against both sides; None: every metric,
    by its name on both sides."""
    if not specs:
        return None
    named = _pairs(specs, "--metric")
    for mine, theirs in named:
        for side, name in ((original, mine), (rescored, theirs)):
            if name not in side.metrics:
                raise ValueError(f"--metric {mine}={theirs}: {side.label} has no metric "
                                 f"{name} (it has: {', '.join(sorted(side.metrics))})")
    return named

