"""Saved files in, a replay index out: the load that `serve`, `inspect`, `index` and `run`
start with, with progress on a terminal and a report of what was loaded and skipped.

The files are planned and read by `saved.loader` (which reader reads which file); every
record goes to the one `Builder`; what could not be read is counted, never dropped silently.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LoadError
from ..paths import NO_GENERATION
from ..saved.formats import LoadContext
from ..saved.loader import Plan, context, plan, progress_bar, read
from ..saved.record import Record
from ..settings import DEFAULT_MAX_LINE
from .builder import Builder
from .index import Index


@dataclass
class Loaded:
    index: Index
    plan: Plan
    ctx: LoadContext
    seconds: float
    examples: dict[str, Record] = field(default_factory=dict)
    per_file: Counter[tuple[str, str]] = field(default_factory=Counter)


def load(paths: Sequence[str | Path], *, skip_bad_lines: bool = False,
         aliases: dict[str, str] | None = None, progress: bool = True,
         max_line: int = DEFAULT_MAX_LINE, tokenizer: str | None = None) -> Loaded:
    """Read every saved file into an index. Raises LoadError on the first bad line unless
    `skip_bad_lines`, in which case the returned context lists what was skipped."""
    start = time.perf_counter()
    ctx = context(skip_bad_lines=skip_bad_lines, max_line=max_line, tokenizer=tokenizer)
    planned = plan(paths, ctx)
    bar = progress_bar(planned.total_bytes, "loading", progress)
    ctx.on_progress = bar.update
    builder = Builder()
    per_file: Counter[tuple[str, str]] = Counter()
    examples: dict[str, Record] = {}
    # The cyclic garbage collector would walk the growing index again and again while it
    # is built (nothing in it is garbage): off until the load is done.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for record in read(planned, ctx):
            try:
                builder.add(record)
            except LoadError as error:
                ctx.bad(error)
                continue
            per_file[(str(record.source.get("file")), record.model)] += 1
            if record.response is not None and "previous_response_id" not in record.request \
                    and record.endpoint not in NO_GENERATION:
                examples.setdefault(record.endpoint, record)
        index = builder.build(aliases)
    finally:
        bar.close()
        if collecting:
            gc.enable()
    return Loaded(index, planned, ctx, time.perf_counter() - start, examples, per_file)


def report_lines(loaded: Loaded) -> list[str]:
    """What was loaded, skipped and ignored, in lines for a human."""
    runs = loaded.index.models.values()
    lines = [*loaded.plan.notes, f"loaded {sum(r.records for r in runs)} saved exchanges "
             f"({sum(len(r.entries) for r in runs)} prompts) for {len(loaded.index.models)} "
             f"model(s) from {len(loaded.plan.files)} file(s) in {loaded.seconds:.2f}s"]
    for run in sorted(runs, key=lambda r: r.name):
        answers = f", {len(run.tokenizer)} tokenizer answers" if run.tokenizer else ""
        lines.append(f"  model {run.name}: {run.records} exchanges, {len(run.entries)} prompts, "
                     f"{run.samples} samples, {run.unusable_records} unusable{answers}")
    tokenizer = loaded.ctx.tokenizer
    if tokenizer is not None:
        lines += [f"  warning: the tokenizer: {caveat}" for caveat in tokenizer.caveats]
    for reason, count in sorted(loaded.ctx.skipped.items()):
        examples = ", ".join(loaded.ctx.skipped_examples.get(reason, []))
        lines.append(f"  skipped {count} row(s): {reason} (e.g. {examples})")
    for error in loaded.ctx.bad_lines[:10]:
        lines.append(f"  bad line skipped: {error}")
    if len(loaded.ctx.bad_lines) > 10:
        lines.append(f"  ... and {len(loaded.ctx.bad_lines) - 10} more bad lines")
    if loaded.plan.ignored:
        lines.append(f"  ignored {len(loaded.plan.ignored)} file(s) in no known format "
                     f"(e.g. {loaded.plan.ignored[0]})")
    return lines
