"""Serve a loaded index with uvicorn, and tell the user where to point clients."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import uvicorn

from . import store, workers
from .app import create_app
from .errors import LoadError
from .index import Index, prompt_of
from .loader import load, report_lines
from .record import Recorder, RecordWriter, create_record_app
from .records import CHAT_PATH
from .replay import PromptSource
from .settings import Settings


@dataclass
class Opened:
    """A saved run ready to serve: loaded from its files, or opened from an index file."""

    index: Index
    prompts: PromptSource | None
    report: list[str]
    examples: list[tuple[str, str, dict[str, Any]]]  # (endpoint, model, keyed prompt)


def open_run(paths: Sequence[str | Path], settings: Settings) -> Opened:
    indexes = [Path(p) for p in paths if store.is_index(Path(p))]
    if not indexes:
        loaded = load(paths, skip_bad_lines=settings.skip_bad_lines,
                      aliases=settings.aliases())
        examples = [(r.endpoint, r.model, prompt_of(r))
                    for _, r in sorted(loaded.examples.items())]
        return Opened(loaded.index, loaded.saved_prompts, report_lines(loaded), examples)
    if len(paths) > 1:
        raise LoadError(str(indexes[0]), None, "an index file is served on its own; build "
                        "one index from all the saved files with `replay-server index`")
    index = store.StoredIndex(indexes[0], settings.aliases())
    report = [f"opened index {indexes[0]}: " + ", ".join(
        f"model {name}: {run.records} exchanges, {len(run.entries)} prompts"
        for name, run in index.models.items())]
    report += [f"  warning: {f} changed since the index was built; rebuild it"
               for f in index.stale_sources()]
    return Opened(index, None, report, index.examples())


def snippet_lines(opened: Opened, base_url: str) -> list[str]:
    """Ready-to-paste commands that replay one saved prompt."""
    lines = [f"  export OPENAI_BASE_URL={base_url} OPENAI_API_KEY=replay"]
    for endpoint, model, prompt in opened.examples:
        body: dict[str, Any] = {"model": model}
        if endpoint == CHAT_PATH:
            body["messages"] = prompt["messages"]
        else:
            body["prompt"] = prompt["prompt"]
        data = orjson.dumps(body).decode()
        lines.append(f"  curl -s {base_url.removesuffix('/v1')}{endpoint} "
                     f"-H 'Content-Type: application/json' -d {shlex.quote(data)}")
        if endpoint == CHAT_PATH:
            lines += ["  # or, with the openai package installed (pip install openai):",
                      "  python - <<'EOF'", "  from openai import OpenAI",
                      f"  r = OpenAI().chat.completions.create(model={model!r}, "
                      f"messages={prompt['messages']!r})",
                      "  print(r.choices[0].message.content)", "  EOF"]
    return lines


def serve(paths: Sequence[str | Path], settings: Settings, say: Callable[[str], None]) -> None:
    """Load, then serve until interrupted; `say` tells the user what was loaded and, once
    the socket listens, where to point clients."""
    opened = open_run(paths, settings)
    for line in opened.report:
        say(line)
    if settings.workers > 1:
        workers.check(opened.index, settings)
    sock, base_url = bind(settings.host, settings.port)
    say(f"replay-server: ready on {base_url}")
    for line in snippet_lines(opened, base_url):
        say(line)
    if settings.workers > 1:
        workers.run(paths, settings, sock)
        return
    app = create_app(settings, opened.index, opened.prompts)
    run_uvicorn(app, sock, settings.log_level, settings.access_log)


def bind(host: str, port: int) -> tuple[socket.socket, str]:
    """A listening socket (port 0 picks a free one) and the /v1 base URL it serves."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    bound_host, bound_port = sock.getsockname()[:2]
    # bound to every address: show the one a client on this machine can use
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(bound_host, bound_host)
    shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
    return sock, f"http://{shown}:{bound_port}/v1"


def run_uvicorn(app: Any, sock: socket.socket, log_level: str, access_log: bool) -> None:
    """Serve until SIGINT or SIGTERM; in-flight requests are drained first."""
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log,
                            timeout_graceful_shutdown=30)
    uvicorn.Server(config).run(sockets=[sock])


def record(upstream: str, out: Path, host: str, port: int, log_level: str,
           say: Callable[[str], None]) -> None:
    """Run the recording proxy until interrupted, then say what was recorded."""
    writer = RecordWriter(out)
    if writer.set_aside is not None:
        say(f"warning: {out} ended with a cut line (a crash?); moved it to {writer.set_aside}")
    recorder = Recorder(upstream, writer)
    sock, base_url = bind(host, port)
    say(f"replay-server record: forwarding to {recorder.upstream}, saving to {out}")
    say(f"replay-server record: ready on {base_url}")
    say(f"  export OPENAI_BASE_URL={base_url}")
    try:
        run_uvicorn(create_record_app(recorder), sock, log_level, False)
    finally:
        writer.close()
        say(recorder.summary())
