"""`replay-server record`: the recording proxy in front of an upstream server, until
interrupted; then what was recorded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..saved.writer import RecordWriter, writable
from ..settings import Settings
from ..web.listen import bind, loaded, run_uvicorn, stop_signals
from ..web.recorder import Recorder, create_record_app
from ..wire.families import FAMILIES
from ..wire.family import Family
from .base_urls import VARIABLES


def record(upstream: str, out: Path, host: str, port: int, log_level: str,
           say: Callable[[str], None]) -> None:
    """Run the recording proxy until interrupted (SIGINT or SIGTERM), then say what was
    recorded."""
    with stop_signals():
        _record(upstream, out, host, port, log_level, say)


def _record(upstream: str, out: Path, host: str, port: int, log_level: str,
            say: Callable[[str], None]) -> None:
    writable(out, "--out", append=True)
    writer = RecordWriter(out)
    if writer.set_aside is not None:
        say(f"warning: {out} ended with a cut line (a crash?); moved it to {writer.set_aside}")
    recorder = Recorder(upstream, writer)
    app = create_record_app(recorder)  # before the ready line, as in _serve
    sock, base_url = bind(host, port)
    try:  # a SIGTERM from the ready line on still gets the summary
        say(f"replay-server record: forwarding to {recorder.upstream}, saving to {out}")
        if (why := recorder.probe()) is not None:
            # the model server may still be starting: the proxy serves all the same
            say(f"warning: cannot reach the upstream {recorder.upstream} ({why}); the "
                "recorder keeps serving, and answers 502 until the upstream answers")
        lines = hints(recorder, base_url)
        loaded()
        say(f"replay-server record: ready on {base_url}")
        for line in lines:
            say(line)
        run_uvicorn(app, sock, Settings(log_level=log_level))
    finally:
        writer.close()
        say(recorder.summary())


def hints(recorder: Recorder, base_url: str) -> list[str]:
    """Where to point the clients of each API the upstream serves (`Recorder.serves`,
    asked of one endpoint per client variable; every API's when it cannot say), in the
    form each SDK reads (`base_urls.VARIABLES`: OpenAI's the /v1 URL `base_url`,
    Anthropic's the root); where the key goes, and how to stop. An upstream that has none
    of the APIs' endpoints (a wrong path in its URL, most likely) is said so, with every
    API's variable: never a hint without one."""
    first: dict[str, Family] = {}  # client variable -> a family of its API
    for family in FAMILIES.values():
        first.setdefault(family.client_variable, family)
    served: set[str] = set()
    for name, family in first.items():
        answer = recorder.serves(family)
        if answer is None:  # it cannot be reached (yet): it may serve any
            served = set(first)
            break
        if answer:
            served.add(name)
    warning = []
    if not served:
        served = set(first)
        asked = [" ".join(f.probe or ("POST", f.path)) for f in first.values()]
        warning = [f"warning: the upstream {recorder.upstream} answers 404 (or 405) to "
                   f"{', '.join(asked)}: it serves none of the APIs replay-server records; "
                   "is --upstream's URL right (its path)?"]
    chosen = [v for v in VARIABLES if v.name in served]
    keys = ", ".join(v.key for v in chosen if v.key is not None)
    return [*warning, *(f"  export {v.name}={v.url(base_url)}" for v in chosen),
            f"  # the client's own API key ({keys}) passes through to the upstream; it is "
            "never saved",
            "  # Ctrl-C (or SIGTERM) stops the recorder; it then says what it saved"]
