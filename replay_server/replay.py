"""The replay service: one request body in, one reply out. No HTTP framework in here.

It parses the request (protocol), picks the saved samples for every prompt (index rules),
and only when every prompt has an answer commits the cursor moves and builds the reply, so
a failed request never consumes a sample and the match is decided before any byte of a
stream is sent. It also keeps the counters and the recent misses that the status
endpoints report, and logs every replay error once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import ChainMap, Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from . import keys, protocol, responses
from .errors import NoMatch, ReplayError
from .index import Index, ModelRun, Rules, Selection, choose
from .nearest import Catalog, first_difference
from .records import CHAT_PATH

log = logging.getLogger(__name__)

SOURCE_HEADER = b"x-replay-source"
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]

# Saved prompts of one model, for miss diagnostics: (prompt, where) pairs.
PromptSource = Callable[[str], Iterable[tuple[dict[str, Any], str]]]


@dataclass(slots=True)
class Reply:
    headers: list[tuple[bytes, bytes]]
    body: bytes | None = None
    stream: Iterator[bytes] | None = None


def _header_value(where: str) -> bytes:
    return quote(where, safe="/:._-() ").encode("ascii")


class Replayer:
    def __init__(self, index: Index, rules: Rules, prompts: PromptSource | None = None) -> None:
        self.index = index
        self.rules = rules
        self._prompts = prompts
        self._catalogs: dict[str, Catalog] = {}
        self._catalog_lock = threading.Lock()
        self.cursors: dict[Any, int] = {}
        self.counts: dict[str, Counter[str]] = {name: Counter() for name in index.models}
        self.misses: deque[dict[str, Any]] = deque(maxlen=100)
        self.started = time.time()

    def reset(self) -> None:
        """Forget every cursor and counter, as if the server had just started."""
        self.cursors.clear()
        self.misses.clear()
        for counter in self.counts.values():
            counter.clear()

    def handle(self, endpoint: str, body: bytes) -> Reply:
        """The reply to one request, or a ReplayServerError (rendered by the caller)."""
        request = protocol.parse(endpoint, body)
        run = self.index.run(request.model)
        moves: list[tuple[Any, int]] = []
        selections = [self._select(run, request, i, prompt, moves)
                      for i, prompt in enumerate(request.prompts)]
        for cursor_key, value in moves:
            self.cursors[cursor_key] = value
        self.counts[run.name]["hits"] += len(selections)
        headers = [(SOURCE_HEADER, _header_value(selections[0][0][0].where))]
        if not request.stream:
            body = responses.encode(selections)
            length = (b"content-length", str(len(body)).encode())
            return Reply(JSON_HEADERS + [length] + headers, body=body)
        full = responses.body(selections)
        return Reply(SSE_HEADERS + headers,
                     stream=responses.chunks(endpoint, full, request.include_usage))

    def _select(self, run: ModelRun, request: protocol.ReplayRequest, i: int,
                prompt: dict[str, Any], moves: list[tuple[Any, int]]) -> Selection:
        key = keys.key_of(prompt)
        try:
            entry = run.entries.get(key)
            if entry is None:
                raise self._no_match(run.name, request, prompt)
            cursors = ChainMap(dict(moves), self.cursors) if moves else self.cursors
            selection, move = choose(entry, request.n, request.params, self.rules,
                                     cursors, (run.name, key))
        except ReplayError as error:
            self._count_error(run.name, request, i, error)
            raise
        if move is not None:
            moves.append(move)
        return selection

    def _count_error(self, model: str, request: protocol.ReplayRequest, i: int,
                     error: ReplayError) -> None:
        if len(request.prompts) > 1:
            error.message = f"prompt {i} of {len(request.prompts)}: {error.message}"
        self.counts[model][str(error.code)] += 1
        self.misses.append({"time": time.time(), "model": model, "endpoint": request.endpoint,
                            "code": error.code, "message": error.message})
        log.warning("replay error %s model=%s %s: %s", error.code, model, request.endpoint,
                    error.message.replace("\n", " "))

    def _no_match(self, model: str, request: protocol.ReplayRequest,
                  prompt: dict[str, Any]) -> NoMatch:
        what = "messages" if request.endpoint == CHAT_PATH else "prompt"
        message = f"no saved generation for this prompt (model `{model}`, {request.endpoint})."
        found = self.catalog(model).nearest(prompt)
        if found is None:
            message += f" Model `{model}` has no saved prompt for this endpoint."
        else:
            saved, where = found
            message += (f" Nearest saved prompt: {where}; first difference: "
                        f"{first_difference(prompt, saved)}.")
        message += (" Check that the harness, task, prompt template and chat template match "
                    "the saved run; `replay-server inspect` lists what is saved.")
        return NoMatch(message, param=what)

    def catalog(self, model: str) -> Catalog:
        """The saved prompts of a model, sorted for nearest-prompt search; built on demand."""
        with self._catalog_lock:
            catalog = self._catalogs.get(model)
            if catalog is None:
                saved = self._prompts(model) if self._prompts is not None else ()
                catalog = self._catalogs[model] = Catalog.build(saved)
            return catalog

    def models_body(self) -> bytes:
        return orjson.dumps(protocol.models_body(sorted(self.index.models), int(self.started)))

    def status(self) -> dict[str, Any]:
        models = {}
        for name, run in self.index.models.items():
            models[name] = {
                "records": run.records,
                "prompts": len(run.entries),
                "samples": run.samples,
                "unusable_records": run.unusable_records,
                **{k: self.counts[name][k] for k in _STATUS_COUNTS},
            }
        totals = {k: sum(m[k] for m in models.values())
                  for k in ("records", "prompts", "samples", "unusable_records", *_STATUS_COUNTS)}
        return {"key_version": keys.KEY_VERSION, "uptime_s": round(time.time() - self.started, 3),
                "models": models, "totals": totals,
                "aliases": self.index.aliases}


_STATUS_COUNTS = ("hits", "replay_no_match", "replay_unusable", "replay_ambiguous",
                  "replay_n_mismatch", "replay_exhausted", "replay_params_mismatch")
