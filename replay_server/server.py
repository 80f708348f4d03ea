"""Serve a loaded index with uvicorn, and tell the user where to point clients."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import uvicorn

from .app import create_app
from .loader import Loaded, load, report_lines
from .record import Recorder, RecordWriter, create_record_app
from .records import CHAT_PATH
from .settings import Settings


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
    sock, base_url = bind(settings.host, settings.port)
    say(f"replay-server: ready on {base_url}")
    for line in snippet_lines(loaded, base_url):
        say(line)
    run_uvicorn(app, sock, settings.log_level, settings.access_log)


def bind(host: str, port: int) -> tuple[socket.socket, str]:
    """A listening socket (port 0 picks a free one) and the /v1 base URL it serves."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
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
