"""`replay-server run`: serve a saved run, run a harness against it, fail on anything but a
faithful rescoring.

For CI, and for harnesses that swallow HTTP errors (scoring a failed request as an empty
answer, or retrying): the server runs in this process on a free port, COMMAND runs with
every base-URL variable harnesses read pointing at it (`base_urls`), and when COMMAND ends
the report (`report`) says what was served, what got no saved generation and why (distinct
requests, with how many attempts each), and which saved generations were never asked for.
`run` stops COMMAND, and everything it started (`command`), on SIGINT, SIGTERM or SIGHUP,
at the first miss with --stop-on-miss, and once one distinct request has been refused
--max-attempts times (a harness that resends a refusal forever would never end); then it
reports.

Exit status, the first that applies (the codes, and what `--help` says of them: exits.py):
- 2: the saved run cannot be loaded (a bad file, FILE:LINE), or a bad option: COMMAND
  never ran;
- MISSED (3): a request got no saved generation: a replay error, or any other error
  answer to a request that may have cost a generation, one on a generation endpoint or
  one that sends something (a malformed request, an unknown model, a body too large, a
  wrong API key, a misspelled endpoint, an internal error; a probe of the base URL is
  none); or a request reached the server and got no answer: cut off in flight (begun,
  never received whole), or answered but never delivered (its client left first),
  whoever stopped it, except when run itself stopped COMMAND (--stop-on-miss,
  --max-attempts, a signal: the miss or the signal already decides the status). It
  outranks COMMAND's own failure: harnesses that exit non-zero when items fail would
  otherwise hide it.
  A tokenizer call (vLLM's /tokenize, ...) that went unanswered is no such request: it
  carries no generation, so it is reported loudly but fails the run only with --strict.
  With a shared state (--state, window.py), any replica's request counts, and a store
  that cannot be read at the end fails the run too;
- UPSTREAM_FAILED (6): with --upstream, a request forwarded there got no answer to save
  (the upstream's error answer, no answer, a broken stream, an answer that cannot be
  saved, a call the client gave up on), and no later attempt of the same request was
  saved: a judge's failed call is scored by harnesses as a verdict, while failed attempts
  followed by a saved answer are a client's retries that got through (reported only);
- COMMAND's own, when it fails; when a signal N to `run` stopped COMMAND, 128+N in its
  place (a shell's convention: 130 SIGINT, 143 SIGTERM, 129 SIGHUP), so that an
  interrupted run is never 5, 4 or 0, while a miss or a failed forwarded request seen
  before the signal still outranks it;
- NO_REQUESTS (5): no request reached the server at all, replayed or forwarded upstream
  (COMMAND answered from
  somewhere else: a harness's disk cache, or a base URL it does not take from the
  environment);
- UNUSED (4): saved samples were never asked for (unless --allow-unused: a deliberate
  subset);
- DONE (0).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..index.samples import Rules
from ..replay.replayer import Replayer
from ..replay.state import shared
from ..saved.writer import writable
from ..settings import Settings
from ..web.app import create_app
from ..web.listen import InThread
from ..wire.credentials import shown
from . import base_urls
from .command import MAX_ATTEMPTS, Command, on_refusal, stopped_by_signals
from .exits import DONE, MISSED, NO_REQUESTS, UNUSED, UPSTREAM_FAILED
from .report import report, write_report
from .serve import open_run, upstream_of
from .window import Window, check_server


def verdict(replayer: Replayer, code: int, allow_unused: bool,
            status_of: str | None = None, stopped: bool = False,
            window: Window | None = None) -> tuple[int, str]:
    """The exit status, the first that applies (see the module docstring), and why;
    `status_of`: what COMMAND's non-zero `code` means; `stopped`: run stopped COMMAND (a
    miss, --max-attempts, a signal), so requests the stop left without an answer do not
    fail the run again; `window`: a shared state's (requests in flight on a replica that
    died are said, and fail the run only through what they left unused, or, under
    `allow_unused`, by themselves)."""
    stats = replayer.stats
    if window is not None and window.failed is not None:
        return MISSED, (f"the shared state could not be read at the end, so what every "
                        f"replica served is not known ({window.failed}): failing")
    if stats.failures:
        return MISSED, (f"{len(stats.failures)} distinct request(s) got no saved generation "
                        f"({stats.failed()} attempt(s)): failing")
    # Requests in flight on a dead replica fail the run only through the samples a client
    # that never resent them leaves unused; under --allow-unused nothing would, so they do.
    gone = sum(window.gone.values()) if window is not None and not allow_unused else 0
    no_answer = stats.in_flight() - gone + stats.undelivered
    if no_answer and not stopped:
        return MISSED, f"{no_answer} request(s) reached the server and got no answer: failing"
    unanswered = stats.tokenizer["unanswered"]
    if unanswered and replayer.rules.strict:
        return MISSED, (f"{unanswered} tokenizer call(s) went unanswered, and --strict "
                        "fails the run on them: failing")
    if stats.forward_failures:
        return UPSTREAM_FAILED, (f"{len(stats.forward_failures)} distinct request(s) "
                                 f"forwarded upstream got no answer to save "
                                 f"({stats.forward_failed()} attempt(s)): failing")
    if code != 0:
        return code, status_of or f"COMMAND failed with exit status {code}"
    if stats.answered == 0 and not stats.forwarded:
        return NO_REQUESTS, ("no request reached the replay server: COMMAND got its answers "
                             "somewhere else (a harness's disk cache, such as lighteval's "
                             ".litellm_cache or dspy's cache, or a base URL it does not take "
                             "from the environment): failing")
    unused = sum(stats.unused(m) for m in replayer.index.models)
    if unused and not allow_unused:
        return UNUSED, (f"{unused} saved sample(s) were never asked for: the harness asked "
                        "for less than was saved (fewer docs or repeats, or a harness cache "
                        "answered part of the run; --allow-unused accepts a deliberate "
                        "subset): failing")
    forwarded = sum(c["saved"] for c in stats.forwarded.values())
    return DONE, "every request was answered from the saved run" + (
        f" ({unused} saved sample(s) never asked for, allowed)" if unused else "") + (
        f" or by the upstream ({forwarded} exchange(s) saved)" if forwarded else "") + (
        f"; {unanswered} tokenizer call(s) went unanswered (no generation was affected: "
        "see the report)" if unanswered else "")


def run_command(paths: Sequence[str | Path], settings: Settings, command: Sequence[str], *,
                allow_unused: bool, stop_on_miss: bool, say: Callable[[str], None],
                report_to: Path | None = None, base_url_vars: Sequence[str] = (),
                max_attempts: int = MAX_ATTEMPTS, server: str | None = None) -> int:
    """Serve `paths` (or, with `server`, have the replicas sharing --state behind that URL
    serve them), run `command` against it, report; returns the exit status."""
    if server is not None and settings.state is None:
        raise ValueError("--server needs --state: the verdict of requests that other "
                         "servers answer is read from the state they share")
    for name in base_url_vars:  # a bad name is a bad option: before anything is loaded
        base_urls.check_name(name)
    if report_to is not None:
        writable(report_to, "--report")
    opened = open_run(paths, settings)
    for line in opened.report:
        say(line)
    if report_to is not None:  # before COMMAND runs: a refusal writes and runs nothing
        opened.inputs.refuse_output(report_to)
    with upstream_of(opened, settings, say) as recorder:
        app = None if server is not None else \
            create_app(settings, opened.index, recorder, opened.tokenizer)
        rules = Rules(settings.strict, settings.allow_ambiguous)
        replayer: Replayer = app.state.replayer if app is not None else Replayer(
            opened.index, rules, state=shared(opened.index, str(settings.state),
                                              shown(str(settings.state)),
                                              settings.state_prefix, rules))
        replayer.stats.whole_run = True  # the verdict is every pass's, resets or not
        if report_to is not None:
            replayer.stats.tracked = {}
        window = Window(replayer, say) if replayer.state.shared else None
        try:
            code, ran = _serve_command(replayer, app, server, settings, command,
                                       (stop_on_miss, max_attempts), say, base_url_vars,
                                       window)
        finally:
            if app is None:
                replayer.state.close()
    for line in report(replayer, ran.why is not None, window.gone if window else None):
        say(line)
    if report_to is not None:
        count = write_report(report_to, replayer)
        say(f"replay-server run: wrote {count} request(s) to {report_to}")
    return _conclude(replayer, code, ran, allow_unused, say, window)


def _conclude(replayer: Replayer, code: int, ran: Command, allow_unused: bool,
              say: Callable[[str], None], window: Window | None = None) -> int:
    """Say why COMMAND stopped, if `run` stopped it, and the verdict; its exit status. When
    `run` stopped COMMAND at a miss, the miss decides; on a signal, the signal's status
    (128+N) stands in COMMAND's place in the verdict: after a miss, before 5, 4 and 0."""
    at_miss = ran.why is not None and ran.signum is None
    if ran.why is not None:
        say(f"replay-server run: stopped COMMAND {ran.why}")
    status_of = f"COMMAND failed with exit status {code}" if ran.signum is None else \
        f"COMMAND was stopped on {signal.Signals(ran.signum).name}: exit status {code}"
    if not at_miss and code != 0 and (replayer.stats.failures or
                                      replayer.stats.forward_failures):
        say(f"replay-server run: {status_of}")  # (outranked)
    status, why = verdict(replayer, 0 if at_miss else code, allow_unused, status_of,
                          ran.why is not None, window)
    say(f"replay-server run: {why}")
    return status


@contextmanager
def _serving(app: Any, server: str | None, settings: Settings) -> Iterator[str]:
    """The /v1 URL COMMAND is pointed at, for as long as it runs: `app` served in this
    process, or `server` (replicas sharing --state, behind a load balancer)."""
    if server is None:
        with InThread(app, settings) as running:
            yield running.base_url
        return
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--server {shown(server)}: not an http(s) URL")
    base = server.rstrip("/")
    yield base if base.endswith("/v1") else base + "/v1"


def _serve_command(replayer: Replayer, app: Any, server: str | None, settings: Settings,
                   command: Sequence[str], stops: tuple[bool, int],
                   say: Callable[[str], None], base_url_vars: Sequence[str],
                   window: Window | None) -> tuple[int, Command]:
    """Serve `app` (or have `server` serve) while `command` runs: its exit status, and
    the command (why `run` stopped it, if it did). `stops`: --stop-on-miss,
    --max-attempts. `window`: a shared state's, opened before COMMAND starts and closed
    (what every replica served, folded) once it ended."""
    with _serving(app, server, settings) as base_url:
        env = base_urls.environment(os.environ, base_url,
                                    settings.api_key or "replay-server", base_url_vars)
        where = "serving on" if server is None else "replicas sharing the state behind"
        ran = Command()

        def stop(why: str, signum: int | None = None) -> None:
            replayer.stats.stopping = True  # (first: a client the stop cuts off is no failure)
            if ran.stop(why, signum):
                say(f"replay-server run: stopping COMMAND and everything it started {why}")
            elif signum is not None:
                say(f"replay-server run: killing what is left of COMMAND at once ({why} "
                    "while stopping it)")

        if server is not None and window is not None:
            check_server(base_url, settings.api_key, window.state.prefix)
        replayer.stats.on_error = on_refusal(stop, *stops)
        replayer.stats.tokenizer_errors_fail = settings.strict  # they fail the run then
        if window is not None:
            window.open(replayer.event("reset"))
        say(f"replay-server run: {where} {shown(base_url)}; running: {' '.join(command)}")
        with stopped_by_signals(lambda name, signum: stop(f"on {name}", signum)):
            ran.start(command, env)
            code = ran.wait()
        if window is not None:
            window.close()
    return code, ran
