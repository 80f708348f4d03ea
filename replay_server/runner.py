"""`replay-server run`: serve a saved run, run a harness against it, fail on any miss.

For CI, and for harnesses that swallow HTTP errors (scoring a failed request as an empty
answer, or retrying forever): the server runs in this process on a free port, COMMAND
runs with OPENAI_BASE_URL / OPENAI_API_BASE pointing at it and a dummy OPENAI_API_KEY, and
when COMMAND ends the report says what was served, what missed and why, and which saved
generations were never asked for.

Exit status: COMMAND's own when it fails; else MISSED (3) when any replay request got no
saved generation; else UNUSED (4) with --require-all when saved samples went unused; else 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import uvicorn

from .app import create_app
from .replay import Replayer
from .server import bind, open_run
from .settings import Settings
from .stats import OUTCOMES

MISSED = 3
UNUSED = 4
GRACE_S = 10.0


class _Server:
    """uvicorn in a background thread of this process."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.sock, self.base_url = bind(settings.host, settings.port)
        config = uvicorn.Config(app, log_level=settings.log_level,
                                access_log=settings.access_log)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise OSError("the replay server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(GRACE_S)
        self.sock.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate COMMAND and everything it started; kill what outlives the grace period."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def report(replayer: Replayer) -> list[str]:
    """What happened, for a human: answers, errors with reasons, unused samples."""
    stats = replayer.stats
    lines = ["replay report:"]
    for name, outcome in stats.per_model().items():
        errors = ", ".join(f"{k}={outcome[k]}" for k in OUTCOMES[1:] if outcome[k])
        lines.append(f"  model {name}: {outcome['hits']} prompts answered; "
                     f"errors: {errors or 'none'}; saved samples never asked for: "
                     f"{outcome['unused_samples']}")
        if outcome["unused_samples"]:
            lines.append(f"    e.g. {', '.join(stats.unused_examples(name))}")
    if stats.rejected:
        lines.append("  rejected requests: " + ", ".join(
            f"HTTP {code} x{n}" for code, n in sorted(stats.rejected.items())))
    for miss in list(stats.misses)[:20]:
        lines.append(f"  miss [{miss['code']}] {miss['endpoint']} model={miss['model']}: "
                     f"{miss['message']}")
    return lines


def missed(replayer: Replayer) -> int:
    per_model = replayer.stats.per_model().values()
    return sum(sum(m[k] for k in OUTCOMES[1:]) for m in per_model) + sum(
        replayer.stats.rejected.values())


def run(paths: Sequence[str | Path], settings: Settings, command: Sequence[str], *,
        require_all: bool, stop_on_miss: bool, say: Callable[[str], None]) -> int:
    """Serve `paths`, run `command` against it, report; returns the exit status."""
    if settings.workers != 1:
        raise ValueError("`run` serves from its own process: --workers is for `serve`")
    opened = open_run(paths, settings)
    for line in opened.report:
        say(line)
    app = create_app(settings, opened.index, opened.prompts)
    replayer: Replayer = app.state.replayer
    stopped = threading.Event()
    with _Server(app, settings) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url,
               "OPENAI_API_BASE": server.base_url,
               "OPENAI_API_KEY": settings.api_key or "replay-server"}
        say(f"replay-server run: serving on {server.base_url}; running: {' '.join(command)}")
        proc = subprocess.Popen(list(command), env=env, start_new_session=True)
        if stop_on_miss:
            def on_error(miss: dict[str, Any]) -> None:
                stopped.set()
                threading.Thread(target=_stop, args=(proc,), daemon=True).start()
            replayer.stats.on_error = on_error
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            _stop(proc)
            raise
    if code < 0:  # killed by a signal: report it the way a shell does
        code = 128 - code
    for line in report(replayer):
        say(line)
    if stopped.is_set():
        say("replay-server run: stopped COMMAND at the first miss (--stop-on-miss)")
        return MISSED
    if code != 0:
        say(f"replay-server run: COMMAND failed with exit status {code}")
        return code
    misses = missed(replayer)
    if misses:
        say(f"replay-server run: {misses} request(s) got no saved generation: failing")
        return MISSED
    unused = sum(replayer.stats.unused(m) for m in replayer.index.models)
    if require_all and unused:
        say(f"replay-server run: {unused} saved sample(s) were never asked for "
            "(--require-all): failing")
        return UNUSED
    say("replay-server run: every request was answered from the saved run")
    return 0
