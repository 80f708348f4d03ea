"""`replay-server record`: the recording proxy in front of an upstream server, until
interrupted; then what was recorded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..saved.writer import RecordWriter, writable
from ..settings import Settings
from ..web.listen import bind, loaded, run_uvicorn, stop_signals
from ..web.recorder import Recorder, create_record_app, probe


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
        if (why := probe(recorder.upstream)) is not None:
            # the model server may still be starting: the proxy serves all the same
            say(f"warning: cannot reach the upstream {recorder.upstream} ({why}); the "
                "recorder keeps serving, and answers 502 until the upstream answers")
        loaded()
        say(f"replay-server record: ready on {base_url}")
        say(f"  export OPENAI_BASE_URL={base_url}")
        run_uvicorn(app, sock, Settings(log_level=log_level))
    finally:
        writer.close()
        say(recorder.summary())
