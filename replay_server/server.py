"""Load saved runs into an index (with progress and a report) and serve it with uvicorn."""

from __future__ import annotations

import shlex
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from tqdm import tqdm

from . import loader
from .app import create_app
from .formats import LoadContext
from .index import Builder, Index, prompt_of
from .records import CHAT_PATH, Record
from .settings import Settings


@dataclass
class Loaded:
    index: Index
    plan: loader.Plan
    ctx: LoadContext
    seconds: float
    examples: dict[str, Record] = field(default_factory=dict)

    def saved_prompts(self, model: str) -> Iterator[tuple[dict[str, Any], str]]:
        """Every saved prompt of a model, read again from the files (for miss diagnostics)."""
        ctx = LoadContext(skip_bad_lines=True)
        for record in loader.read(self.plan, ctx):
            if record.model == model:
                yield prompt_of(record), record.where


def load(paths: Sequence[str | Path], *, skip_bad_lines: bool = False,
         aliases: dict[str, str] | None = None, progress: bool = True) -> Loaded:
    """Read every saved file into an index. Raises LoadError on the first bad line unless
    `skip_bad_lines`, in which case the returned context lists what was skipped."""
    start = time.perf_counter()
    planned = loader.plan(paths)
    bar = tqdm(total=planned.total_bytes, unit="B", unit_scale=True, desc="loading",
               delay=0.5, leave=False, disable=not (progress and sys.stderr.isatty()))
    ctx = LoadContext(skip_bad_lines=skip_bad_lines, on_progress=bar.update)
    builder = Builder()
    examples: dict[str, Record] = {}
    try:
        for record in loader.read(planned, ctx):
            builder.add(record)
            if record.response is not None:
                examples.setdefault(record.endpoint, record)
    finally:
        bar.close()
    index = builder.build(aliases)
    return Loaded(index, planned, ctx, time.perf_counter() - start, examples)


def report_lines(loaded: Loaded) -> list[str]:
    """What was loaded, skipped and ignored, in lines for a human."""
    runs = loaded.index.models.values()
    lines = [f"loaded {sum(r.records for r in runs)} saved exchanges "
             f"({sum(len(r.entries) for r in runs)} prompts) for {len(loaded.index.models)} "
             f"model(s) from {len(loaded.plan.files)} file(s) in {loaded.seconds:.2f}s"]
    for run in sorted(runs, key=lambda r: r.name):
        lines.append(f"  model {run.name}: {run.records} exchanges, {len(run.entries)} prompts, "
                     f"{run.samples} samples, {run.unusable_records} unusable")
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


def snippet_lines(loaded: Loaded, base_url: str) -> list[str]:
    """Ready-to-paste commands that replay one saved prompt."""
    lines = [f"  export OPENAI_BASE_URL={base_url} OPENAI_API_KEY=replay"]
    for endpoint, record in sorted(loaded.examples.items()):
        body = {"model": record.model}
        if endpoint == CHAT_PATH:
            body["messages"] = record.request["messages"]
        else:
            body["prompt"] = record.request["prompt"]
        data = orjson.dumps(body).decode()
        lines.append(f"  curl -s {base_url.removesuffix('/v1')}{endpoint} "
                     f"-H 'Content-Type: application/json' -d {shlex.quote(data)}")
        if endpoint == CHAT_PATH:
            lines += ["  python - <<'EOF'", "  from openai import OpenAI",
                      f"  r = OpenAI().chat.completions.create(model={record.model!r}, "
                      f"messages={record.request['messages']!r})",
                      "  print(r.choices[0].message.content)", "  EOF"]
    return lines


def serve(paths: Sequence[str | Path], settings: Settings, say: Callable[[str], None]) -> None:
    """Load, then serve until interrupted; `say` tells the user what was loaded and, once
    the socket listens, where to point clients."""
    loaded = load(paths, skip_bad_lines=settings.skip_bad_lines, aliases=settings.aliases())
    for line in report_lines(loaded):
        say(line)
    app = create_app(settings, loaded.index, loaded.saved_prompts)
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    sock.listen(2048)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    base_url = f"http://{shown}:{port}/v1"
    say(f"replay-server: ready on {base_url}")
    for line in snippet_lines(loaded, base_url):
        say(line)
    config = uvicorn.Config(app, log_level=settings.log_level, access_log=settings.access_log,
                            timeout_graceful_shutdown=30)
    uvicorn.Server(config).run(sockets=[sock])
