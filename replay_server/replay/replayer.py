"""The replay service: one request body in, one reply out. No HTTP framework in here.

It parses the request (its API family), picks the saved samples for every prompt (index rules),
makes the reply, and only then takes the samples from the cursors, so a failed request
never consumes a sample and the match is decided before any byte of a stream is sent. The
hit is counted once the answer is delivered (`settle`); an answer that never left gives
its samples back, so that a client gone first uses none up. A request for a model the
saved runs do not have may instead go upstream (a judge: `forwards` decides, the web
layer forwards, `forwarded` counts); a saved model never does.
It also keeps the counters and the recent misses that the status endpoints report,
and logs once every request that gets no saved generation.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from collections import ChainMap
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, cast
from urllib.parse import quote
from uuid import uuid4

import orjson

from ..errors import (
    Ambiguous,
    BadRequest,
    Exhausted,
    NoMatch,
    NotFound,
    ReplayError,
    ReplayServerError,
    StoreUnavailable,
)
from ..index.index import Entry, Exchange, Index, ModelRun, Selection
from ..index.samples import Cursors, Rules, choose, streamed
from ..paths import MODELS_PATH
from ..saved.local_tokenizer import LocalTokenizer
from ..wire import keys
from ..wire.families import FAMILIES, family_for, family_of
from ..wire.family import Family, ReplayRequest
from .miss import no_match
from .state import Conflict, Places, State
from .stats import FORWARD_FAILURES, Stats, error_event, outcome_name
from .tokenizer import TokenizerAnswers

log = logging.getLogger(__name__)

SOURCE_HEADER = b"x-replay-source"
_JSON_TYPE = (b"content-type", b"application/json")
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
# How often a request decides again when another replica claimed its sample first.
CLAIM_TRIES = 50


@dataclass(slots=True)
class Taken:
    """What an answer took from the saved run, to count once it is delivered, or to give
    back if it is not (`Replayer.settle`)."""

    model: str
    endpoint: str
    chosen: list[tuple[Entry | Exchange, Selection]]
    sent: list[Selection]
    keys: list[bytes]
    places: Places  # (cursor key, place) of each sample taken from a cursor
    epoch: int  # the state's resets when it was taken: a reset frees every place


@dataclass(slots=True)
class Reply:
    """What the web layer sends for an answered request: status 200, these headers (the
    content type, a length for a body, the saved record's place), this body or stream;
    and, for a replayed generation, what it took (settled by `Replayer.settle`)."""

    headers: list[tuple[bytes, bytes]]
    body: bytes
    taken: Taken | None = None


def _source_header(exchange: Exchange) -> bytes:
    """The `x-replay-source` value of an exchange, made once."""
    value = exchange.source_header
    if value is None:
        value = exchange.source_header = _header_value(exchange.where)
    return value


def _named_model(body: bytes, fields: dict[str, Any] | None = None) -> str | None:
    """The model that a request which could not be parsed names, if it names one (its
    path's, where the path carries it: `fields`)."""
    if fields and isinstance(fields.get("model"), str):
        return str(fields["model"])
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


def _header_value(where: str) -> bytes:
    if where.isascii() and where.isprintable():
        return where.encode("ascii")
    return quote(where, safe="/:._-() ").encode("ascii")


class Replayer:
    """The replay service: a request's bytes in, a Reply (or a ReplayServerError) out.

    It holds the index, the rules (`--strict`, `--allow-ambiguous`) and the one piece of
    replay state, the repeats cursors; it counts and logs every request that gets no saved
    generation (`Stats`), since some harnesses swallow errors. A request goes one way
    whatever it asks: parse, select the saved run, choose the samples of every prompt, make
    the reply, and only then take the samples from the cursors (so that no other request
    is given them); once the answer is delivered, count the hit, and if it never is, give
    the samples back. A request that fails has taken nothing, and a stream's fate is
    decided before its first byte is sent. The usual request (one prompt, one whole saved
    exchange) is the same path in few steps, not a path of its own, so it counts and
    serves exactly as every other request does.
    """

    def __init__(self, index: Index, rules: Rules, tokenizer: LocalTokenizer | None = None,
                 upstream_models: tuple[str, ...] | None = None,
                 state: State | None = None) -> None:
        self.index = index
        self.rules = rules
        # which models may go upstream (shell-style patterns; empty: any the saved runs
        # lack), or None: no upstream, every request is replayed
        self.upstream_models = upstream_models
        # the cursors and the counts: this process's own, or shared (`--state`)
        self.state = state if state is not None else State(Stats(index))
        self.stats = self.state.stats
        self.started = time.time()
        # vLLM's tokenizer endpoints: recorded answers, else computed with `tokenizer`
        self.tokenizer = TokenizerAnswers(index, self.state, tokenizer)

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """An event of this replica (`Stats.apply` says what each counts)."""
        return {"kind": kind, "replica": self.state.replica, **fields}

    def begun(self) -> None:
        """Count a request as it begins (the web layer's)."""
        self.state.record(self.event("begun"))

    def called(self) -> None:
        """Count an answered batch protocol call that sends something."""
        self.state.record(self.event("call"))

    def reset(self) -> None:
        """Forget every cursor and counter, as if the server had just started (with a
        shared state: on every replica)."""
        self.state.reset(self.event("reset"))

    def current(self) -> Stats:
        """The counts of every replica's requests so far."""
        return self.state.current()

    def handle(self, endpoint: str, body: bytes, headers: Iterable[tuple[bytes, bytes]] = (),
               fields: dict[str, Any] | None = None) -> Reply:
        """`take`, then `settle` as delivered: the answer of a caller that hands it over
        whole at once (in this process)."""
        reply = self.take(endpoint, body, headers, fields, patient=False)
        self.settle(reply, True)
        return reply

    def take(self, endpoint: str, body: bytes, headers: Iterable[tuple[bytes, bytes]] = (),
             fields: dict[str, Any] | None = None, patient: bool = True) -> Reply:
        """The reply to one request (its body, its headers for a family that reads some:
        `Family.headers`, and the fields its path carries: `Family.fields_of`), its
        samples taken, to be `settle`d once it was sent; or a ReplayServerError (counted
        and logged here, rendered by the caller). With a shared state, `Busy` when every
        sample is taken but some only promised to an answer on its way (and `patient`:
        the caller waits and asks again; else the request is exhausted). A shared state
        that cannot be reached: StoreUnavailable, counted (kept until the store is back)."""
        try:
            self.state.check()
            request, run = self._request(endpoint, body, headers, fields)
            if request.family.chained:
                self._key_responses(run, request)
            for _ in range(CLAIM_TRIES):
                try:
                    return self._answer(endpoint, run, request, patient)
                except Conflict:  # (another replica took a sample first: decide again)
                    continue
            error = StoreUnavailable(f"the saved samples of this prompt were claimed by "
                                     f"other replicas {CLAIM_TRIES} times in a row")
            self.count(run.name, request.endpoint, error, request.model)
            error.kept = True  # (counted)
            raise error
        except StoreUnavailable as error:
            if not error.kept:  # (else counted already, and kept)
                self.count(None, endpoint, error)
            raise

    def _answer(self, endpoint: str, run: ModelRun, request: ReplayRequest, patient: bool
                ) -> Reply:
        """Choose, make the reply, and take its samples (Conflict: another replica took
        one first)."""
        view = self.state.cursors()
        chosen, places = self._choose(run, request, view, patient)
        sent = [selection for _, selection in chosen]
        if request.stream and len(sent) == 1:
            sent[0] = streamed(chosen[0][0], sent[0], self.rules.strict,
                               request.family.generations)
        try:
            reply = self._reply(request, sent)
        except ReplayError as error:  # (samples the family cannot make one answer of)
            self.count(run.name, request.endpoint, error, request.model)
            raise
        # The request is answered: nothing can fail from here on but another replica's
        # claim coming first.
        epoch = self.state.claim(view, places) if places else 0
        reply.taken = Taken(run.name, endpoint, chosen, sent, request.keys, places, epoch)
        return reply

    def settle(self, reply: Reply, delivered: bool) -> None:
        """Count a delivered answer as a hit; give the samples of one never delivered back
        (the next request for its prompt gets them: a client gone first takes none, since
        it will ask again, or its item went unscored) and count it as undelivered."""
        taken = reply.taken
        if taken is None:
            return
        reply.taken = None  # (settled once)
        if not delivered:
            self.state.give_back(taken.places, taken.epoch, self.event(
                "undelivered", model=taken.model, endpoint=taken.endpoint))
            log.warning("answer undelivered model=%s %s: the client left before it could be "
                        "sent; the saved samples it carried were given back", taken.model,
                        taken.endpoint)
            return
        state = self.state
        state.commit(taken.places, taken.epoch, {  # (the hot path: a dict made at once)
            "kind": "delivered", "replica": state.replica, "model": taken.model,
            "endpoint": taken.endpoint, "chosen": taken.chosen, "sent": taken.sent,
            "keys": taken.keys})

    def forwards(self, body: bytes, fields: dict[str, Any] | None = None) -> str | None:
        """The model a request names (in its body, or its path: `fields`), when it goes
        upstream instead of being replayed: a model no saved run answers to (by
        `Index.select`'s rules, aliases included) that `--upstream-models` lets through.
        A saved model never goes: the candidate is always replayed, strictly."""
        if self.upstream_models is None:
            return None
        model = _named_model(body, fields)
        if model is None or self.index.serves(model):
            return None
        patterns = self.upstream_models
        if patterns and not any(fnmatchcase(model, p) for p in patterns):
            return None
        return model

    def forwarded(self, endpoint: str, body: bytes, model: str, outcome: str,
                  why: str) -> None:
        """Count what became of a request that went upstream (the recorder's outcome);
        a failed attempt is logged once, at WARNING, since it fails `run` unless a retry
        gets through. A request is told from another by its key, or, where it has none
        here (one that continues a turn is keyed by the upstream's answer; one this
        server cannot read, the upstream judged), by its body: a retry sends the same."""
        prompt = None
        try:
            request = family_of(endpoint).parse(body)
            if request.family.chained and request.family.previous_id(request.data) is None:
                request.key(None)
            prompt = request.keys[0].hex() if request.keys else None  # (a batch: its first)
        except ReplayServerError:
            pass
        prompt = prompt or hashlib.sha256(body).hexdigest()
        counted = self.state.record(self.event(
            "forward", model=model, endpoint=endpoint, prompt=prompt, outcome=outcome,
            why=why)) or outcome_name(outcome)
        if counted in FORWARD_FAILURES:
            log.warning("upstream error (%s) model=%s %s: %s", counted, model, endpoint,
                        why.replace("\n", " "))

    def _request(self, endpoint: str, body: bytes, headers: Iterable[tuple[bytes, bytes]],
                 fields: dict[str, Any] | None) -> tuple[ReplayRequest, ModelRun]:
        """The parsed request and the saved run its `model` selects."""
        request = None
        try:
            request = family_of(endpoint).parse(body, headers, fields)
            return request, self.index.select(request.model)
        except ReplayServerError as error:
            asked = request.model if request is not None else _named_model(body, fields)
            self.count(None, endpoint, error, asked)
            raise

    def _reply(self, request: ReplayRequest, sent: list[Selection]) -> Reply:
        """The reply that sends these samples (a recorded stream's frames were checked
        against its saved body when the record was loaded: `saved.record.make_record`)."""
        headers = [(SOURCE_HEADER, _source_header(sent[0][0][0]))]
        if request.family.id_header is not None:  # (one id per request, as the API's)
            headers.append((request.family.id_header, b"req_replay_%s" % uuid4().hex.encode()))
        if not request.stream:
            body = request.family.reply(sent)
            return Reply([_JSON_TYPE, (b"content-length", b"%d" % len(body)), *headers], body)
        # Every event is known at once: one write of all of them (chunked, no length),
        # rather than one per event, which only costs time.
        family = request.family
        kind, stream = family.framed(request.data, family.stream(sent, request.include_usage))
        return Reply([(b"content-type", kind), *SSE_HEADERS[1:], *headers], stream)

    def _key_responses(self, run: ModelRun, request: ReplayRequest) -> None:
        """Key a request of a chained family (Responses); `previous_response_id` by the
        conversation that the model's saved response of that id holds
        (`Family.previous_of`)."""
        previous = None
        response_id = request.family.previous_id(request.data)
        try:
            if response_id is not None:
                try:
                    saved = self.index.saved_response(run.name, response_id)
                except ValueError as e:
                    raise Ambiguous(f"`previous_response_id`: {e}; which conversation it "
                                    "continues cannot be told", param="previous_response_id"
                                    ) from None
                if saved is None:
                    raise NoMatch(
                        f"`previous_response_id` {response_id!r} names no saved response of "
                        f"model `{run.name}`: a conversation chained by id replays only from "
                        "the ids the saved run's responses have (served as saved); was the "
                        "earlier turn answered by this server?", param="previous_response_id")
                previous = orjson.loads(saved.previous)
            request.key(previous)
        except ReplayServerError as error:
            self.count(run.name, request.endpoint, error, request.model)
            raise

    def _choose(self, run: ModelRun, request: ReplayRequest, view: Cursors, patient: bool
                ) -> tuple[list[tuple[Entry | Exchange, Selection]], Places]:
        """Each prompt's entry and the samples chosen for it, and the places they take from
        the cursors (`view`; taken by the caller, once the whole request is answered)."""
        chosen: list[tuple[Entry | Exchange, Selection]] = []
        places: Places = []
        taken: dict[Any, int] = {}  # what the prompts before took (a batch may repeat one)
        rules, entries, keys_ = self.rules, run.entries, request.keys
        i = 0
        try:
            params = request.params() if rules.strict else b""
        except BadRequest as error:  # (--strict's parameters nest too deeply to compare)
            self.count(run.name, request.endpoint, error, request.model)
            raise
        try:
            seed = request.data.get("seed")
            for i, key in enumerate(keys_):
                entry = entries.get(key)
                if entry is None:
                    raise no_match(self.index, run.name, request.endpoint,
                                   request.prompts[i])
                # (ChainMap only reads the view: the places are taken by `State.claim`)
                cursors = ChainMap(taken, cast("MutableMapping[Any, int]", view)) \
                    if taken else view
                selection, place = choose(entry, request.n, params, seed, rules, cursors,
                                          (run.name, key))
                if place is not None:
                    places.append(place)
                    taken[place[0]] = cursors.get(place[0], 0) | 1 << place[1]
                chosen.append((entry, selection))
        except ReplayError as error:
            busy = self.state.busy(view) if isinstance(error, Exhausted) and patient else None
            if busy is not None:  # (not decided yet: the caller asks again)
                raise busy from None
            if len(keys_) > 1:
                error.message = f"prompt {i} of {len(keys_)}: {error.message}"
            error.detail.setdefault("prompt", keys_[i].hex())
            self.count(run.name, request.endpoint, error, request.model)
            raise
        return chosen, places

    def retrieve(self, family: Family, response_id: str, stream: bool) -> Reply:
        """GET /v1/responses/{id}: a saved answer of a chained `family` (Responses) by its
        id (as the server that sent it kept it), its body, or streamed as it was; 404 like
        vLLM for any other."""
        found = []
        for model in self.index.response_models(response_id):
            try:
                saved = self.index.saved_response(model, response_id)
            except ValueError as e:
                raise Ambiguous(str(e), param="response_id") from None
            if saved is not None:
                found.append(saved.exchange)
        if not found:
            raise NotFound(f"Response with id '{response_id}' not found.", param="response_id")
        if len({e.body for e in found}) > 1:
            raise Ambiguous(f"several saved models answered with the response id "
                            f"{response_id!r}", param="response_id")
        exchange = found[0]
        headers = [(SOURCE_HEADER, _header_value(exchange.where))]
        if stream:
            reply = Reply(SSE_HEADERS + headers, family.stream([[(exchange, None)]], False))
        else:
            body = exchange.body
            reply = Reply([_JSON_TYPE, (b"content-length", b"%d" % len(body)), *headers],
                          body)
        self.state.record(self.event("retrieved"))  # (a saved generation, no sample taken)
        return reply

    def count(self, model: str | None, endpoint: str, error: ReplayServerError,
              asked: str | None = None) -> None:
        """Count and log, once, a request that gets no saved generation: `model` is the
        saved run it selected (None: none), `asked` the model the request named.

        Every such request is one line at WARNING (`run` fails on each of them), naming the
        model asked for (`-` when the request named none, or was not read): `replay error
        CODE` for a replay decision (the `replay_*` codes), `request error STATUS` for any
        other error (a malformed request, an unknown model or route, a wrong method, a body
        too large, a missing API key).

        An unsaved prompt of a family that counts tokens (`Family.counts_tokens`:
        count_tokens) is no such request: a token count, never a generation, it is counted
        as an unanswered tokenizer call (`run` says so loudly and fails on it only with
        --strict). An inspect_ai log keeps no count_tokens calls, so a Claude run rescored
        from its log would otherwise fail though every generation replayed."""
        family = FAMILIES.get(endpoint)
        if family is not None and family.counts_tokens and isinstance(error, NoMatch):
            why = (f"no saved {family.name} answer for this request (an inspect_ai log keeps "
                   "none: record the run to have them)")
            call = str(error.detail.get("prompt") or error.message)
            first = self.state.record(self.event(
                "tokenizer_error", endpoint=endpoint, model=model, why=why, call=call))
            (log.debug if first is False else log.warning)(
                "tokenizer call unanswered model=%s %s: %s", asked or model or "-", endpoint,
                why)
            return
        self.state.record(error_event(model, endpoint, error, self.state.replica), now=True)
        named = asked or model or "-"
        if asked and model and asked != model:
            named = f"{asked} (saved model {model})"
        kind = f"replay error {error.code}" if isinstance(error, ReplayError) \
            else f"request error {error.status}"
        quoted = error.detail.get("difference_quoted")
        log.warning("%s model=%s %s: %s%s", kind, named, endpoint,
                    error.message.replace("\n", " "), f" [{quoted}]" if quoted else "")

    def models_body(self, headers: Iterable[tuple[bytes, bytes]] = (), path: str = MODELS_PATH,
                    query: str = "") -> bytes:
        """The model list, in the shape of the API the request is of (`family_for`, by its
        path and query, then its headers: Google's for `/v1beta/models` or `x-goog-api-key`,
        Anthropic's for `anthropic-version`), else vLLM's (each model's `max_model_len` as
        recorded, if it was). A 404 on another path than /v1/models that is no API's
        address (`Family.addressed`): no such route."""
        family = family_for(path, headers, query)
        if path != MODELS_PATH and not family.addressed(path, query):
            raise NotFound(f"Not Found: GET {path}")
        models = self.index.models
        return orjson.dumps(family.models([(name, models[name].max_model_len)
                                           for name in sorted(models)], int(self.started)))

    def model_body(self, name: str, headers: Iterable[tuple[bytes, bytes]], path: str,
                   query: str = "") -> bytes:
        """One model by its name (aliases apply), as the request's API answers `GET
        .../models/{model}` (`Family.model`: Google's); a 404 for an API without that
        route (no such route: vLLM has none), or a model no saved run answers to."""
        family = family_for(path, headers, query)
        if family.model is None:
            raise NotFound(f"Not Found: GET {path}")
        run = self.index.select(name)  # (ModelNotFound: a 404 naming the saved models)
        return orjson.dumps(family.model(name, run.max_model_len))

    def status(self) -> dict[str, Any]:
        stats = self.current()
        outcomes = stats.per_model()
        models = {name: {"records": run.records, "prompts": len(run.entries),
                         "samples": run.samples, "unusable_records": run.unusable_records,
                         **outcomes[name]}
                  for name, run in self.index.models.items()}
        totals = {k: sum(m[k] for m in models.values())
                  for k in next(iter(models.values()), {})}
        return {"key_version": keys.KEY_VERSION, "uptime_s": round(time.time() - self.started, 3),
                "models": models, "totals": totals, "rejected": dict(stats.rejected),
                "tokenizer": {k: stats.tokenizer[k]
                              for k in ("recorded", "computed", "unanswered")},
                "aliases": self.index.aliases,
                "forwarded": {name: dict(c) for name, c in stats.forwarded.items()},
                "state": self.state.about(),
                "process": {"host": socket.gethostname(), "pid": os.getpid()}}
