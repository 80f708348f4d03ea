"""The one extension point for saved-run formats: a reader, and the context it reports to.

A reader claims files (`detect`, from the path and the file's first bytes) and turns the
files it claimed in one group (one command-line argument) into native records (`read`).
Adding a harness is adding one module with one reader, and listing it in `formats/__init__`.

Readers report bad lines through `LoadContext.bad` (which raises unless the user asked to
skip bad lines) and rows they deliberately leave out (loglikelihood rows, truncated
prompts) through `LoadContext.skip`, so that nothing is dropped without a count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import LoadError
from ..records import DEFAULT_MAX_LINE, Record, iter_jsonl, parse_line


class Reader(Protocol):
    name: str

    def detect(self, path: Path, head: bytes) -> bool:
        """Whether this reader claims the file. `head` is its first line (capped)."""
        ...

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        """Native records from the files this reader claimed in one group."""
        ...


@dataclass
class LoadContext:
    skip_bad_lines: bool = False
    max_line: int = DEFAULT_MAX_LINE
    on_progress: Callable[[int], None] = lambda n: None
    bad_lines: list[LoadError] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_examples: dict[str, list[str]] = field(default_factory=dict)

    def bad(self, error: LoadError) -> None:
        """A line that cannot be read: stop the load, or note it when skipping is allowed."""
        if not self.skip_bad_lines:
            raise error
        self.bad_lines.append(error)

    def skip(self, reason: str, where: str) -> None:
        """A row left out on purpose (not an error): counted, with a few examples kept."""
        self.skipped[reason] += 1
        examples = self.skipped_examples.setdefault(reason, [])
        if len(examples) < 3:
            examples.append(where)

    def progress(self, nbytes: int) -> None:
        self.on_progress(nbytes)


def json_lines(path: Path, ctx: LoadContext) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each non-blank line of a JSONL file, reporting
    progress; a line that is not JSON goes to `ctx.bad` (which stops the load unless the
    user asked to skip bad lines)."""
    file = str(path)
    for line, raw, size in iter_jsonl(path, ctx.max_line):
        ctx.progress(size)
        if not raw:
            continue
        try:
            value = parse_line(raw, file, line, ctx.max_line)
        except LoadError as error:
            ctx.bad(error)
            continue
        yield line, value
