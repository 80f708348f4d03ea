"""Serve a loaded index with uvicorn, and tell the user where to point clients."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson
import uvicorn

from .app import create_app
from .loader import Loaded, load, report_lines
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
