"""`replay-server index`: compile saved runs into one index file, once, so that `serve`
starts at once whatever the run's size and several workers can share it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..index import file as index_file
from ..index.loading import load, report_lines
from ..saved.writer import writable
from .exits import DONE, SKIPPED


def build_index(paths: Sequence[str | Path], output: Path, *, skip_bad_lines: bool,
                max_line: int, tokenizer: str | None, say: Callable[[str], None]) -> int:
    """Load `paths`, write the index file `output`; the exit status (1: bad lines were
    skipped). A bad saved file, or an output that cannot be written, raises LoadError."""
    writable(output, "-o")
    loaded = load(paths, skip_bad_lines=skip_bad_lines, max_line=max_line,
                  tokenizer=tokenizer)
    for line in report_lines(loaded):
        say(line)
    prompts = index_file.write(loaded, output)
    say(f"wrote {output}: {prompts} prompts")
    return SKIPPED if loaded.ctx.bad_lines else DONE
