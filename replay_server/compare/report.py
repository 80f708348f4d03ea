"""`run --report` files, read back: which saved instances answered each distinct request.

Each line is one distinct request (`model`, `endpoint`, `prompt`: the key, in hex),
`"status": "hit"` with `sources` (every saved instance that holds the prompt: `file`,
`line`, `instance`) and `served` (FILE:LINE (instance) of what answered, per attempt), or
`"status": "miss"` with the error `code`, or `"status": "forwarded"` (sent to `--upstream`:
a judge's request, which pairs nothing). A hit line without `sources` was written by an
older replay-server and cannot pair anything: it is a bad line, named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LoadError
from ..saved.formats.base import LoadContext, json_lines
from .verdicts import resolved


@dataclass(frozen=True, slots=True)
class Source:
    """A saved instance as its records name it (`file` resolved)."""

    file: str | None
    line: int | None
    instance: str | None

    def as_source(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "instance": self.instance}

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else str(self.file)
        return f"{where} ({self.instance})" if self.instance is not None else where


@dataclass(slots=True)
class Line:
    number: int
    status: str
    code: str | None
    sources: list[Source] = field(default_factory=list)
    served: list[str] = field(default_factory=list)


@dataclass
class Report:
    path: str
    # (endpoint, prompt key in hex) -> its lines (one per model that was asked for it)
    lines: dict[tuple[str, str], list[Line]] = field(default_factory=dict)

    def get(self, endpoint: str, prompt: str) -> list[Line]:
        return self.lines.get((endpoint, prompt), [])


def read_report(path: Path) -> Report:
    file = str(path)
    if not path.is_file():
        raise LoadError(file, None, "no such file (the report `run --report FILE` wrote)")
    report = Report(file)
    for number, obj in json_lines(path, LoadContext()):
        line, endpoint, prompt = _line(obj, file, number)
        if prompt is not None:
            report.lines.setdefault((endpoint, prompt), []).append(line)
    return report


def _line(obj: Any, file: str, number: int) -> tuple[Line, str, str | None]:
    if not isinstance(obj, dict):
        raise LoadError(file, number, "expected a JSON object (a `run --report` line)")
    status, endpoint, prompt = obj.get("status"), obj.get("endpoint"), obj.get("prompt")
    if status not in ("hit", "miss", "forwarded"):
        raise LoadError(file, number, "expected \"hit\", \"miss\" or \"forwarded\"",
                        field="status")
    if not isinstance(endpoint, str):
        raise LoadError(file, number, "expected the endpoint path", field="endpoint")
    if prompt is not None and not isinstance(prompt, str):
        raise LoadError(file, number, "expected the prompt key in hex", field="prompt")
    line = Line(number, status, obj.get("code") if isinstance(obj.get("code"), str) else None)
    if status == "hit":
        sources = obj.get("sources")
        if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
            raise LoadError(file, number, "missing: which saved instances answered (a report "
                            "of an older replay-server: run `replay-server run --report` "
                            "again)", field="sources")
        line.sources = [Source(resolved(s.get("file")), _int(s.get("line")),
                               _str(s.get("instance"))) for s in sources]
        served = obj.get("served")
        line.served = [s for s in served if isinstance(s, str)] if isinstance(served, list) \
            else []
    return line, endpoint, prompt


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
