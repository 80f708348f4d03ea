"""What the replay server counts: answers, every request it could not answer, and saved
samples never used.

Some harnesses swallow HTTP errors (they score a failed request as an empty answer, or
retry), so every error is also kept here for `/replay/status`, `/replay/misses` and the
report of `replay-server run`, and can trigger a hook (`run --stop-on-miss`). An error is
counted per model under its replay code when the request named a served model; every
other error on the API (a malformed request, an unknown model, a body too large, an
internal error, an unknown /v1 route) is counted as *rejected*, by HTTP status. Failures
are also grouped by what was asked, so that a harness's retries count as attempts of one
failure, not as several.

Requests for a model the saved runs lack that went to an upstream (`--upstream`: a judge)
are counted apart, per model asked for, by outcome (`FORWARD_OUTCOMES`): never as replayed.
`run` judges each distinct forwarded request by its outcome: an attempt that got no answer
to save (the client gave up on it too: it scores the item as failed) fails `run`, unless a
later attempt of the same request was saved (a client's retry: a judge's 429, a timeout);
those recovered failures are still counted and reported. A request whose prompt cannot be
keyed is never taken for another's retry.

vLLM's tokenizer calls (`/tokenize`, ...) are counted apart (`tokenizer`), answered or
not, with each reason one went unanswered: they carry no generation, so they are no
failure of the replay (`run` reports them, and fails on them only with `--strict`).

Every change to the counts is an event (a plain dict, `kind` and its fields), applied by
one function, `Stats.apply`: in-process at once, or, with a shared state (`--state`,
replay/state/), appended to the store's journal and folded by every reader into a Stats of
its own, so that each replica and `run` count the same way. Each event names the replica
that saw it (`replica`), so that requests still in flight are known per replica.

Under `replay-server run` the stats are the run's verdict (`whole_run`): a reset (`POST
/replay/reset`, which harnesses send before a second pass) starts the cursors over but
forgets nothing counted here, so a miss of the first pass still fails the run.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import REPLAY_CODES, ReplayServerError
from ..index.index import Entry, Exchange, Index, Selection, entry_of

# The outcomes counted per model, in the order reports show them.
OUTCOMES = ("hits", *REPLAY_CODES)
# What became of a request forwarded upstream (`--upstream`): saved (answered and appended
# to --out); or no answer to save: the upstream's error answer or no answer at all, a stream
# that broke, an answer that could not be saved, the client left first (its timeout: the
# harness scored the item as failed); or the client left because `run` was stopping
# COMMAND (`stopped`: not a failure of the upstream's, the stop is said apart).
FORWARD_OUTCOMES = ("saved", "upstream_error", "aborted", "unrecordable", "abandoned",
                    "stopped")
FORWARD_FAILURES = ("upstream_error", "aborted", "unrecordable", "abandoned")
_RECORDER_NAMES = {"recorded": "saved"}  # the recorder's name of an outcome, where it differs


def outcome_name(outcome: str) -> str:
    """A forwarded request's outcome as counted (the recorder's name may differ)."""
    return _RECORDER_NAMES.get(outcome, outcome)


@dataclass
class Failure:
    """One distinct request that got no saved generation, and how often it was sent."""

    first: dict[str, Any]
    attempts: int = 1
    last_time: float = field(default=0.0)


def attempt(table: dict[Any, Failure], what: Any, first: dict[str, Any]) -> Failure:
    """One more attempt of the distinct request `what` in `table`: its Failure, made with
    `first` (what its first attempt was) when this is the first."""
    failure = table.get(what)
    if failure is None:
        failure = table[what] = Failure(first, 0)
    failure.attempts += 1
    failure.last_time = first["time"]
    return failure


class Stats:
    """The counters of one replay service: per model, the prompts answered (`hits`) and
    each replay error; every other error answer, by status (`rejected`); the last misses
    and each distinct failure with its attempts; which saved samples were used (a bit per
    choice, by exchange); and, for `run --report`, what answered each distinct prompt
    (`tracked`). Some harnesses swallow errors and exit 0, so the server itself must be
    able to say afterwards what went unanswered, and what no request asked for."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.counts: dict[str, Counter[str]] = {name: Counter() for name in index.models}
        self.rejected: Counter[str] = Counter()
        self.misses: deque[dict[str, Any]] = deque(maxlen=100)
        self.failures: dict[tuple[Any, ...], Failure] = {}
        # requests on the API, counted by the web layer: a replay endpoint's as it begins,
        # another route's as it is answered (a redirect is none: its client asks again)
        self.requests = 0
        self.answered = 0  # requests answered from the saved run (a batch is one)
        self.undelivered = 0  # answers decided but never delivered (the client left first)
        # of those, answers whose replica died with them on their way (`--state`: found
        # dead by another, which gave their samples back)
        self.died = 0
        self.resets = 0
        # batch protocol calls answered that send something (an upload, a create, a
        # cancel, a deletion): no generation of their own (a batch's lines are requests)
        self.calls = 0
        # Per distinct prompt, what was served (only when asked for: `run --report`).
        self.tracked: dict[tuple[str, str, str], dict[str, Any]] | None = None
        # Used choices by exchange, as a bit mask (choice i is bit i); `Exchange.start`
        # identifies an exchange (its offset in the run's body buffer, kept as is in an
        # index file).
        self.used: dict[int, int] = {}
        self.used_samples: Counter[str] = Counter()
        # The uniform entries already marked whole in `used`, by their first exchange's
        # start: a hit on one again changes nothing there, and a popular prompt saved by
        # many instances would otherwise walk them all on every hit.
        self.used_whole: set[int] = set()
        # Called at each failing attempt with its distinct request's failure, and whether
        # it is a miss (a forwarded request's failed attempt is none: a retry may recover
        # it) (`run`: --stop-on-miss at a miss, --max-attempts at any)
        self.on_error: Callable[[Failure, bool], None] | None = None
        # Called for each unanswered tokenizer call too, when those fail the run (--strict)
        self.tokenizer_errors_fail = False
        # vLLM's tokenizer calls, apart from the generations: answered ("recorded",
        # "computed") or "unanswered"; and each reason one went unanswered, per endpoint.
        self.tokenizer: Counter[str] = Counter()
        self.tokenizer_unanswered: dict[tuple[str, str], Failure] = {}
        self.tokenizer_calls: dict[tuple[str, str | bytes], Failure] = {}  # (by call: a digest)
        # Set by `run`: every pass counts, whatever the resets between them.
        self.whole_run = False
        # Requests forwarded upstream, per model asked for (`--upstream`), by outcome; each
        # distinct one that failed there with its failed attempts: still failing, or
        # recovered (a later attempt was saved).
        self.forwarded: dict[str, Counter[str]] = {}
        self.forward_failures: dict[tuple[str, str, str], Failure] = {}
        self.forward_recovered: dict[tuple[str, str, str], Failure] = {}
        # Set by `run` once it stops COMMAND: a forwarded request its client leaves from
        # then on was cut off by the stop (`stopped`), not failed by the upstream.
        self.stopping = False
        # Per replica (a process sharing the state; 0: the only one), its requests begun
        # and not yet given an outcome; and the replicas that stopped cleanly.
        self.open: Counter[int] = Counter()
        self.stopped: set[int] = set()
        # (`--state`) each cursor's place delivered, by epoch: one delivered twice in one
        # pass was served twice (a store that lost its last writes)
        self.taken: set[tuple[int, str, int]] = set()

    def apply(self, event: dict[str, Any]) -> Any:
        """Count one event (see the module docstring): the one way anything is counted.
        Returns what its counting returns (a tokenizer error: whether it is the first of
        its reason; a forwarded outcome: the outcome as counted)."""
        kind = event["kind"]
        replica = event["replica"]
        if kind == "begun":
            self.requests += 1
            self.open[replica] += 1
            return None
        if kind == "stopped":
            self.stopped.add(replica)
            return None
        count = _APPLY[kind]  # (KeyError, before anything is counted: no such event)
        self.open[replica] -= 1  # (every other event is a request's outcome)
        return count(self, event)

    def _delivered(self, event: dict[str, Any]) -> None:
        model, endpoint = event["model"], event["endpoint"]
        for entry, selection in event["chosen"]:
            self.hit(model, entry, selection)
        self.answered += 1
        places = event.get("places", ())  # (a shared state's: cursor, place, ...)
        for cursor, place in zip(places[::2], places[1::2], strict=True):
            if (event["epoch"], cursor, place) in self.taken:
                self.error(model, endpoint, 500, "replay_state_lost", (
                    f"a saved sample was delivered twice in one pass (place {place} of "
                    f"cursor {cursor}): the shared state lost writes it had acknowledged "
                    "(a failover, or an append-only file not yet synced?)"), {},
                    time.time())
            self.taken.add((event["epoch"], cursor, place))
        if self.tracked is not None:
            for key, selection in zip(event["keys"], event["sent"], strict=True):
                self.served(model, endpoint, key, selection[0][0].where)

    def _undelivered(self, event: dict[str, Any]) -> None:
        self.undelivered += 1
        self.died += bool(event.get("died"))

    def _retrieved(self, event: dict[str, Any]) -> None:
        self.answered += 1

    def _call(self, event: dict[str, Any]) -> None:
        self.calls += 1

    def _tokenizer(self, event: dict[str, Any]) -> None:
        self.tokenizer[event["how"]] += 1

    def _error(self, event: dict[str, Any]) -> None:
        self.error(event["model"], event["endpoint"], event["status"], event["code"],
                   event["message"], event["detail"], event["time"])

    def _tokenizer_error(self, event: dict[str, Any]) -> bool:
        return self.tokenizer_error(event["endpoint"], event["model"], event["why"],
                                    event["call"])

    def _forward(self, event: dict[str, Any]) -> str:
        return self.forward(event["model"], event["endpoint"], event["prompt"],
                            event["outcome"], event["why"])

    def _reset(self, event: dict[str, Any]) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget what was counted (`POST /replay/reset`), unless these stats are a whole
        run's (`whole_run`): then the reset is only counted (a request with an outcome)."""
        self.resets += 1
        if self.whole_run:
            return
        for counter in self.counts.values():
            counter.clear()
        self.rejected.clear()
        self.misses.clear()
        self.failures.clear()
        self.forwarded.clear()
        self.forward_failures.clear()
        self.forward_recovered.clear()
        self.requests = self.answered = self.undelivered = self.resets = self.calls = 0
        self.died = 0
        if self.tracked is not None:
            self.tracked.clear()
        self.used.clear()
        self.used_samples.clear()
        self.used_whole.clear()
        self.tokenizer.clear()
        self.tokenizer_unanswered.clear()
        self.tokenizer_calls.clear()

    def hit(self, model: str, entry: Entry | Exchange, selection: Selection) -> None:
        self.counts[model]["hits"] += 1
        picks: Selection = selection
        if isinstance(entry, Entry) and entry.uniform:
            # every sample is the same generation: all of them are used
            first = entry.instances[0].exchanges[0].start
            if first in self.used_whole:
                return
            self.used_whole.add(first)
            picks = [(e, None) for i in entry.instances for e in i.exchanges]
        for exchange, choice in picks:
            self.use(model, exchange, choice)

    def use(self, model: str, exchange: Exchange, choice: int | None) -> None:
        """Mark one saved sample (or a whole exchange: choice None) as asked for."""
        before = self.used.get(exchange.start, 0)
        mask = before | ((1 << exchange.n) - 1 if choice is None else 1 << choice)
        if mask != before:
            self.used[exchange.start] = mask
            self.used_samples[model] += mask.bit_count() - before.bit_count()

    def served(self, model: str, endpoint: str, key: bytes, where: str) -> None:
        """One prompt answered (tracked only when a report was asked for)."""
        if self.tracked is None:
            return
        line = self.tracked.get((model, endpoint, key.hex()))
        if line is None:
            line = self.tracked[(model, endpoint, key.hex())] = {
                "model": model, "endpoint": endpoint, "prompt": key.hex(), "attempts": 0,
                "served": [], "sources": self.sources(model, key)}
        line["attempts"] += 1
        if len(line["served"]) < 100:
            line["served"].append(where)

    def sources(self, model: str, key: bytes) -> list[dict[str, Any]]:
        """Every usable saved instance that holds this prompt, as its records named it
        (`file` made absolute, `line`, `instance`): the one that answered is among them.
        `compare` pairs a rescored instance with the saved instance that answered it, and
        refuses to guess when several share the prompt."""
        value = self.index.models[model].entries.get(key)
        if value is None:
            return []
        found = []
        for instance in entry_of(value).instances:
            first = instance.exchanges[0]
            file = os.path.abspath(str(first.file)) if first.file is not None else None
            found.append({"file": file, "line": first.line, "instance": first.instance})
        return found

    def report_lines(self) -> list[dict[str, Any]]:
        """One line per distinct request: answered (and from which saved records), or
        not (the error, the nearest saved prompt and the structured first difference)."""
        lines = {k: {"status": "hit", **v, "served": list(v["served"])}
                 for k, v in (self.tracked or {}).items()}
        for line in lines.values():
            if "outcomes" in line:  # forwarded upstream: what became of each attempt
                line["outcomes"] = dict(line["outcomes"])
        for (model, endpoint, code, what), failure in self.failures.items():
            miss = failure.first
            key = (str(model), endpoint, str(miss.get("prompt") or what))
            line = lines.setdefault(key, {"model": model, "endpoint": endpoint,
                                          "prompt": miss.get("prompt"), "attempts": 0,
                                          "served": []})
            line.update(status="miss", code=code, message=miss["message"],
                        nearest=miss.get("nearest"),
                        first_difference=miss.get("first_difference"))
            line["attempts"] += failure.attempts
        return list(lines.values())

    def forward(self, model: str, endpoint: str, prompt: str | None, outcome: str,
                why: str) -> str:
        """One request forwarded upstream, and its outcome (the recorder's name for it);
        returns the outcome as counted."""
        outcome = outcome_name(outcome)
        if outcome == "abandoned" and self.stopping:
            outcome = "stopped"
        self.forwarded.setdefault(model, Counter())[outcome] += 1
        what = (model, endpoint, prompt or why)
        if outcome in FORWARD_FAILURES:
            self._forward_failed(what, outcome, why, prompt)
        elif outcome == "saved" and prompt is not None and what in self.forward_failures:
            self._forward_recovered(what)
        if self.tracked is not None and prompt is not None:
            line = self.tracked.setdefault((model, endpoint, prompt), {
                "model": model, "endpoint": endpoint, "prompt": prompt, "attempts": 0,
                "served": [], "status": "forwarded", "outcomes": Counter()})
            line["attempts"] += 1
            line["outcomes"][outcome] += 1
        return outcome

    def _forward_failed(self, what: tuple[str, str, str], outcome: str, why: str,
                        prompt: str | None) -> None:
        """One more failed attempt of a distinct forwarded request: failing until a later
        attempt is saved. A harness that resends it forever is stopped like one that
        resends a refused replay (`on_error`: `run --max-attempts`)."""
        failure = attempt(self.forward_failures, what, {
            "time": round(time.time(), 3), "model": what[0], "endpoint": what[1],
            "code": outcome, "message": why, "prompt": prompt})
        if self.on_error is not None:
            self.on_error(failure, False)

    def _forward_recovered(self, what: tuple[str, str, str]) -> None:
        """A saved attempt after failed ones: they were a client's retries that got
        through; counted apart (no longer failing), and a later failure fails again."""
        failure = self.forward_failures.pop(what)
        earlier = self.forward_recovered.get(what)
        if earlier is None:
            self.forward_recovered[what] = failure
        else:
            earlier.attempts += failure.attempts
            earlier.last_time = failure.last_time

    def forward_failed(self) -> int:
        """Failed attempts of the forwarded requests still failing, retries included."""
        return sum(f.attempts for f in self.forward_failures.values())

    def error(self, model: str | None, endpoint: str, status: int, code: str, message: str,
              detail: dict[str, Any], now: float) -> None:
        """A request the server could not answer from the saved run (`error_event`)."""
        if model is not None and model in self.counts and code in OUTCOMES:
            self.counts[model][code] += 1
        else:
            self.rejected[code] += 1
        miss = {"time": now, "model": model, "endpoint": endpoint, "status": status,
                "code": code, "message": message, **detail}
        self.misses.append(miss)
        what = (model, endpoint, code, detail.get("prompt") or message)
        failure = attempt(self.failures, what, miss)
        if self.on_error is not None:
            self.on_error(failure, True)

    def tokenizer_error(self, endpoint: str, model: str | None, why: str, call: str | bytes
                        ) -> bool:
        """A tokenizer call that got no answer (never a generation: not a failure of the
        replay, see replay/tokenizer.py), counted by its endpoint and reason; `call`
        (a digest of its body) tells a call sent again (`on_error`: `run --max-attempts`)
        from another one. True for the first of its endpoint and reason."""
        self.tokenizer["unanswered"] += 1
        first = {"time": round(time.time(), 3), "model": model, "endpoint": endpoint,
                 "why": why}
        reported = attempt(self.tokenizer_unanswered, (endpoint, why), first)
        again = attempt(self.tokenizer_calls, (endpoint, call), first)
        if self.tokenizer_errors_fail and self.on_error is not None:
            self.on_error(again, True)
        return reported.attempts == 1

    def failed(self) -> int:
        """Requests that got no saved generation, retries included."""
        return sum(f.attempts for f in self.failures.values())

    def unused(self, model: str) -> int:
        return self.index.models[model].samples - self.used_samples[model]

    def with_outcome(self) -> int:
        """Requests that got an answer: from the saved run, an error, a reset's, a
        batch protocol call's, a tokenizer call's (answered or not), or one forwarded
        upstream (whatever became of it)."""
        return self.answered + self.failed() + self.resets + self.calls + \
            self.tokenizer.total() + sum(sum(c.values()) for c in self.forwarded.values())

    def in_flight(self) -> int:
        """Requests begun but never decided: their client left (or was stopped, or too
        slow) before sending them whole. They have no outcome, hit or miss, and, like an
        undelivered answer, they reached the server and got no answer."""
        return max(0, self.requests - self.with_outcome() - self.undelivered)

    def unused_examples(self, model: str, limit: int = 5) -> dict[str, tuple[int, int]]:
        """Where saved samples that no request used came from: the first `limit` distinct
        places (FILE:LINE, as saved), each once, with its unused and saved samples (one
        line may hold several: lm-eval's repeats, or a multiple-choice doc's prompts).
        First in saved order (an exchange's `start`, its place among the saved bodies),
        whichever order the index gives its entries in (an index file's: by key)."""
        counts: dict[str, list[int]] = {}  # place: [unused, saved, its first start]
        for value in self.index.models[model].entries.values():
            for instance in entry_of(value).instances:
                for exchange in instance.exchanges:
                    place = counts.setdefault(exchange.where, [0, 0, exchange.start])
                    place[0] += exchange.n - self.used.get(exchange.start, 0).bit_count()
                    place[1] += exchange.n
                    place[2] = min(place[2], exchange.start)
        unused = sorted((first, where, (n, of)) for where, (n, of, first) in counts.items()
                        if n)
        return {where: counted for _, where, counted in unused[:limit]}

    def per_model(self) -> dict[str, dict[str, int]]:
        return {name: {**{k: self.counts[name][k] for k in OUTCOMES},
                       "unused_samples": self.unused(name)}
                for name in self.index.models}


_APPLY: dict[str, Callable[[Stats, dict[str, Any]], Any]] = {
    "delivered": Stats._delivered, "undelivered": Stats._undelivered,
    "retrieved": Stats._retrieved, "call": Stats._call, "tokenizer": Stats._tokenizer,
    "error": Stats._error, "tokenizer_error": Stats._tokenizer_error,
    "forward": Stats._forward, "reset": Stats._reset,
}


def error_event(model: str | None, endpoint: str, error: ReplayServerError,
                replica: int = 0) -> dict[str, Any]:
    """The event of a request the server could not answer from the saved run."""
    code = str(error.code if error.code is not None else error.status)
    return {"kind": "error", "replica": replica, "model": model, "endpoint": endpoint,
            "status": error.status, "code": code, "message": error.message,
            "detail": dict(error.detail), "time": round(time.time(), 3)}
