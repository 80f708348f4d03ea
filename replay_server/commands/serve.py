"""Serve a loaded index with uvicorn, and tell the user where to point clients."""

from __future__ import annotations

import gc
import importlib.util
import shlex
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import LoadError, shown_file
from ..index import file as index_file
from ..index import heap
from ..index.cache import Options, open_cached
from ..saved.loader import Plan, is_index, progress_bar, tokenizer_of
from ..saved.local_tokenizer import LocalTokenizer
from ..saved.objects import fetch
from ..saved.writer import writable
from ..settings import Settings
from ..web import workers
from ..web.app import create_app
from ..web.listen import bind, loaded, run_uvicorn, stop_signals
from ..web.recorder import Recorder
from ..web.upstream import recorder_for
from ..wire.families import family_of


@dataclass
class Opened:
    """A saved run ready to serve, from an index file: the one given, or the one the cache
    keeps for the saved files given (`index/cache.py`)."""

    index: index_file.StoredIndex
    report: list[str]
    examples: list[tuple[str, str, dict[str, Any]]]  # (endpoint, model, keyed prompt)
    inputs: Plan  # the files it came from: what no output may replace (Plan.refuse_output)
    tokenizer: LocalTokenizer | None = None  # --tokenizer's, loaded once for the process
    paths: Sequence[str | Path] = ()  # what was opened: a URL's local copy in its place


def open_run(paths: Sequence[str | Path], settings: Settings) -> Opened:
    """The saved run of `paths`, once `--out` (if given) is known to be writable: a bad
    output path fails before a long load."""
    if settings.out is not None:
        writable(Path(settings.out), "--out", append=True)
    fetched = fetch(paths, lambda total, what: progress_bar(total, what, True))
    paths = fetched.paths  # a URL's local copy in its place: an index file may be one
    indexes = [Path(p) for p in paths if is_index(Path(p))]
    if not indexes:  # saved files: served through their index, kept in the cache
        cached = open_cached(paths, Options(settings.skip_bad_lines, settings.max_line_size,
                                            settings.tokenizer), settings.aliases(),
                             fetched.urls)
        return Opened(cached.index, fetched.notes + cached.report, cached.examples,
                      cached.inputs, cached.tokenizer, [cached.index.path])
    if len(paths) > 1:
        raise LoadError(str(indexes[0]), None, "an index file is served on its own; build "
                        "one index from all the saved files with `replay-server index`")
    index = index_file.StoredIndex(indexes[0], settings.aliases())
    index.sources.refuse_stale()
    report = [*fetched.notes, f"opened index {shown_file(str(indexes[0]))}: " + ", ".join(
        f"model {name}: {run.records} exchanges, {len(run.entries)} prompts"
        for name, run in index.models.items())]
    missing = index.sources.missing()
    if missing:
        report.append(f"  warning: {len(missing)} saved file(s) the index was built from are "
                      f"not here (e.g. {missing[0]}): whether they changed since cannot be "
                      "told")
    if (unchecked := index.sources.unchecked()) is not None:
        report.append(f"  warning: {unchecked}: whether they changed since cannot be told")
    return Opened(index, report, index.examples(), index.sources.inputs(),
                  tokenizer_of(settings.tokenizer), paths)


@contextmanager
def upstream_of(opened: Opened, settings: Settings, say: Callable[[str], None]
                ) -> Iterator[Recorder | None]:
    """The recorder `--upstream URL --out FILE` asks for (None without them), for the time
    the server runs; then what it forwarded. FILE is never one of the saved inputs."""
    if settings.out is None:
        yield None
        return
    opened.inputs.refuse_output(Path(settings.out))
    recorder = recorder_for(settings)
    assert recorder is not None
    try:
        if recorder.writer.set_aside is not None:
            say(f"warning: {settings.out} ended with a cut line (a crash?); moved it to "
                f"{recorder.writer.set_aside}")
        which = ", ".join(settings.upstream_patterns()) or "any"
        say(f"replay-server: requests for a model the saved runs lack ({which}) go to "
            f"{recorder.upstream}, saved to {settings.out}; saved models are only replayed")
        if (why := recorder.probe()) is not None:
            say(f"warning: cannot reach the upstream {recorder.upstream} ({why}); requests "
                "for it get 502 until it answers")
        yield recorder
    finally:
        recorder.writer.close()
        say("upstream: " + recorder.summary())


# where the snippet puts openai when the server's own interpreter lacks it
_OPENAI_VENV = "~/.cache/replay-server/openai-venv"


def openai_python() -> str | None:
    """This interpreter, when it can import openai (as `make serve`'s venv can), else
    None: the interpreter the snippet's Python line names."""
    return sys.executable if importlib.util.find_spec("openai") else None


def snippet_lines(opened: Opened, base_url: str, python: str | None = None) -> list[str]:
    """Commands that replay one saved prompt each, to paste into another shell as they
    are: curl, and for chat the openai client run by `python` (an interpreter that has
    it; without one, a line that installs it in a venv of its own first). Then the
    environment a harness reads."""
    lines = []
    for endpoint, model, prompt in opened.examples:
        family = family_of(endpoint)
        body: dict[str, Any] = {"model": model, **family.example_request(prompt)}
        data = orjson.dumps(body).decode()
        lines.append(f"  curl -s {base_url.removesuffix('/v1')}{endpoint} "
                     f"-H 'Content-Type: application/json' -d {shlex.quote(data)}")
        if family.client_line is not None:
            lines += _client_lines(family.client_line.format(base_url=base_url), data, python)
    return [*lines, "  # a harness or client that reads the environment:",
            f"  export OPENAI_BASE_URL={base_url} OPENAI_API_KEY=replay"]


def _client_lines(line: str, data: str, python: str | None) -> list[str]:
    code = shlex.quote(line)
    if python is not None:
        return ["  # or with the openai client:", f"  {shlex.quote(python)} -c {code} "
                f"{shlex.quote(data)}"]
    # a venv, since Debian's python3 refuses `pip install` outside one; made with the
    # server's own interpreter, which is there for sure
    venv = _OPENAI_VENV
    return ["  # or with the openai client, installed in a venv of its own first:",
            f"  {shlex.quote(sys.executable)} -m venv {venv} && {venv}/bin/pip install -q openai",
            f"  {venv}/bin/python -c {code} {shlex.quote(data)}"]



def serve(paths: Sequence[str | Path], settings: Settings, say: Callable[[str], None]) -> None:
    """Load, then serve until interrupted (SIGINT or SIGTERM); `say` tells the user what
    was loaded and, once the socket listens, where to point clients."""
    with stop_signals():
        _serve(paths, settings, say)


def _serve(paths: Sequence[str | Path], settings: Settings, say: Callable[[str], None]
           ) -> None:
    opened = open_run(paths, settings)
    for line in opened.report:
        say(line)
    # Everything is built before the ready line: from there on a signal only asks the
    # server to stop (listen.loaded), which it does as soon as uvicorn has started.
    if settings.workers > 1:
        workers.check(opened.index, settings)
        sock, base_url = _ready(opened, settings, say)
        workers.run(opened.paths, settings, sock)  # the index file, fetched if a URL
        say("replay-server: stopped")
        return
    with upstream_of(opened, settings, say) as recorder:
        app = create_app(settings, opened.index, recorder, opened.tokenizer)
        if (where := app.state.replayer.state.where()) is not None:
            say(f"replay-server: the replay's state is shared in {where}")
        # The index lives as long as the server: moved out of the garbage collector's
        # sight, a full collection no longer walks millions of its objects and stalls
        # requests.
        gc.collect()
        gc.freeze()
        heap.trim()  # what the collection freed too (after a load: its free lists' blocks)
        sock, _ = _ready(opened, settings, say)
        run_uvicorn(app, sock, settings)
        say("replay-server: stopped")


def _ready(opened: Opened, settings: Settings, say: Callable[[str], None]
           ) -> tuple[socket.socket, str]:
    """The listening socket, once the ready line, the snippet and how to stop are said."""
    sock, base_url = bind(settings.host, settings.port)
    loaded()
    say(f"replay-server: ready on {base_url}")
    for line in snippet_lines(opened, base_url, openai_python()):
        say(line)
    say("replay-server: Ctrl-C stops the server (SIGINT; SIGTERM too)")
    return sock, base_url
