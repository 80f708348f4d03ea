"""One side of a comparison: every verdict found under one path, by (task, instance).

A directory is walked in sorted order (hidden entries skipped) and each file is read by
the first reader that claims it; a file given by name must be claimed. Rows that add
scores to one instance (lm-eval's one row per filter) are merged; anything that would make
an instance ambiguous fails with FILE:LINE: the same instance in two files (two runs of a
task in one folder), the same metric of an instance twice (a filter row repeated), or a
second row for an instance that disagrees about which item it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LoadError
from .verdicts import Reader, Verdict


@dataclass
class Side:
    label: str  # ORIGINAL or RESCORED, as the command line names them
    path: str
    verdicts: dict[tuple[str, str], Verdict] = field(default_factory=dict)
    harnesses: set[str] = field(default_factory=set)
    files: list[str] = field(default_factory=list)

    def add(self, verdict: Verdict) -> None:
        first = self.verdicts.get(verdict.key)
        if first is None:
            self.verdicts[verdict.key] = verdict
            return
        where = f"{verdict.task} instance {verdict.instance}"
        if first.file != verdict.file:
            raise LoadError(verdict.file, verdict.line, f"{where} was already read from "
                            f"{first.where}: one side must hold one run of each task (give "
                            "the run's own folder or file)")
        if first.witness != verdict.witness:
            raise LoadError(verdict.file, verdict.line, f"{where} is at {first.where} too, "
                            f"as another item ({first.witness} vs {verdict.witness})")
        for name, score in verdict.scores.items():
            if name in first.scores:
                raise LoadError(verdict.file, score.line, f"{where}: metric {name} was "
                                f"already read at {first.where_of(name)}")
            first.scores[name] = score

    @property
    def tasks(self) -> set[str]:
        return {task for task, _ in self.verdicts}

    @property
    def metrics(self) -> set[str]:
        return {name for v in self.verdicts.values() for name in v.scores}


def read_side(label: str, path: str, readers: Sequence[Reader]) -> Side:
    """Every verdict under `path` (a file or a folder); LoadError when there is none."""
    side = Side(label, path)
    root = Path(path)
    if not root.exists():
        raise LoadError(path, None, "no such file or directory")
    for file in _walk(root) if root.is_dir() else [root]:
        reader = next((r for r in readers if r.detect(file)), None)
        if reader is None:
            if file == root:
                raise LoadError(path, None, "not a scored output that compare reads "
                                "(see `replay-server compare --help` for the formats)")
            continue
        side.harnesses.add(reader.NAME)
        side.files.append(str(file))
        for verdict in reader.read(file):
            side.add(verdict)
    if not side.verdicts:
        raise LoadError(path, None, "no scored instances found (lm-eval samples_*.jsonl, "
                        "inspect_ai logs, olmo-eval or oe-eval predictions, lighteval details, "
                        "evalscope reviews)")
    return side


def _walk(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(folder) / name
