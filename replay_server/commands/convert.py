"""`convert`: every saved exchange under some paths as one native JSONL file.

The output holds every record (unusable ones too, so that a prompt whose answer is unusable
still says so) and replays identically: same prompts, instances, samples and saved order.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from ..saved.formats import LoadContext
from ..saved.loader import context, plan, progress_bar, read
from ..saved.record import dump_line
from ..saved.writer import writable, written_whole
from ..settings import DEFAULT_MAX_LINE


def convert_paths(paths: Sequence[str | Path], out: Path, *, skip_bad_lines: bool = False,
            progress: bool = True, max_line: int = DEFAULT_MAX_LINE,
            tokenizer: str | None = None, say: Callable[[str], None] = lambda line: None
            ) -> tuple[int, LoadContext]:
    """Write every saved record under `paths` to `out` as native JSONL; returns the count.

    The file appears whole or not at all (written beside it, then renamed), and never
    replaces one of its own inputs. Each record gets a `source.run` unless it has one, so
    that two conversions served together stay two runs.
    """
    writable(out, "-o")
    ctx = context(skip_bad_lines=skip_bad_lines, max_line=max_line, tokenizer=tokenizer)
    planned = plan(paths, ctx)
    planned.refuse_output(out)
    for note in planned.notes:
        say(note)
    conversion = uuid.uuid4().hex[:12]
    bar = progress_bar(planned.total_bytes, "converting", progress)
    ctx.on_progress = bar.update
    count = 0
    try:
        with written_whole(out) as tmp, tmp.open("wb") as f:
            for record in read(planned, ctx):
                if not isinstance(record.source.get("run"), str):
                    # records of one run stay one run, and never merge with another
                    # conversion's (see Record.run)
                    record.source["run"] = f"{record.origin}#{conversion}"
                f.write(dump_line(record))
                count += 1
    finally:
        bar.close()
    return count, ctx
