"""The recording proxy: forwards to any OpenAI-compatible (or Anthropic-compatible) server
and saves each exchange.

    client -> recorder -> upstream (vLLM, llama.cpp, OpenAI, Anthropic, ...)

- `/v1/chat/completions`, `/v1/completions`, `/v1/responses`, and Anthropic's
  `/v1/messages` and `/v1/messages/count_tokens` are forwarded with the client's headers
  (Authorization and x-api-key included; they are never written down) and their answers
  saved as native records, with the headers that are request fields (`anthropic-beta`);
  so are vLLM's tokenizer calls (`POST /tokenize`, `POST /detokenize`,
  `GET /tokenizer_info`: deterministic, so a replay answers them from the recording), one
  that names no model saved under the upstream's only model (`GET /v1/models`; one to a
  server of several models is not saved); and each model's entry of `GET /v1/models`
  (its `max_model_len`, which the replay's list then gives), once a recording and again
  when it changes; every other path and method
  (embeddings, `GET /v1/responses/{id}`, a path the upstream does not have, ...) is
  forwarded untouched and not saved: the client gets the upstream's own status and body.
  So are the batch protocols' calls (files, batches, Message Batches), but that each line
  of a batch is saved once its result comes through, as the exchange of its endpoint
  (`batch_recorder.BatchRecorder`).
- A stream passes through chunk by chunk as it arrives (`relay.Relay`), while its family's
  aggregator (`Family.aggregator`) rebuilds the body the server would have sent
  unstreamed; the stream's frames are saved too, as sent, so that a replay sends the same
  deltas in the same order.
- An exchange is appended as whole lines, flushed and fsynced *before* the client sees its
  end (the response body, or a stream's `data: [DONE]` or the end of its body): an
  exchange a client has seen complete survives a SIGKILL, and concurrent exchanges never
  interleave within a line.
- A stream is saved when the client received it whole: up to `data: [DONE]`, or, when the
  upstream ends the body cleanly without one (openai-python accepts that), once every
  choice the request asked for has its finish_reason (a Responses stream: its terminal
  event; a Messages stream: `message_stop`). Its frames are saved as sent, with no
  `[DONE]` added, so that a replay sends the same bytes. A stream cut before that is not saved.
- Only exchanges delivered to the client are saved: a client that gives up (a timeout, a
  disconnect) before the answer is complete leaves nothing behind, and the upstream call
  is cancelled; it is counted as abandoned. A harness that then retries gets its retry
  recorded, not an answer it never saw.
- Upstream errors, streams that fail, and answers that do not parse or cannot be
  aggregated pass through untouched and are only counted. The recorder's own errors (an
  upstream it cannot reach: 502, which a retry can cure; a failed write: 500) are in the
  envelope of the request's API family, as the replay server's are.
- The upstream is asked for an uncompressed answer, and whatever encoding it uses anyway
  is decoded before the client sees it.
- Each recorder process is one run (`source.run`): records of two recording sessions
  appended to one file never form one instance.

`record` puts it in front of everything; `serve`/`run --upstream` send it only the
requests for a model the saved runs lack (`web.upstream`), through the same `exchange`,
each with a hook that hears the exchange's outcome. The keys differ (`pass_keys`):
`record` stands in for the server its client means to call, so the client's own
credentials go on to it (that is how a paid API is recorded); on the judge path the
client's key is a stand-in or the replay server's own, so nothing that can carry a key
(`credentials.key_like`: headers, query parameters) goes on, and the upstream gets
`--upstream-api-key` alone, in the form its API reads (`Family.credential`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.types import Receive

from .. import __version__, errors
from ..errors import LoadError
from ..paths import (
    DETOKENIZE_PATH,
    MODELS_PATH,
    NO_GENERATION,
    TOKENIZE_PATH,
    TOKENIZER_ENDPOINTS,
)
from ..saved.record import dump_line, make_record, strip_transport
from ..saved.writer import RecordWriter
from ..wire.credentials import basic_auth, query_without_keys, shown, without_keys
from ..wire.families import ENDPOINTS, endpoint_for, error_body_of, family_for, family_of
from ..wire.family import Aggregator, Family
from ..wire.sse import Frames, StreamError
from .batch_recorder import BatchRecorder
from .batches import PATHS as BATCH_PATHS
from .relay import Relay, unless_gone, watch_disconnect

log = logging.getLogger(__name__)
# Hears one exchange's outcome (`recorded`, `upstream_error`, `abandoned`, `aborted`,
# `unrecordable`) and why, as the recorder counts it.
Outcome = Callable[[str, str], None]
Envelope = Callable[[errors.ReplayServerError], dict[str, Any]]  # (a family's error body)

# Hop-by-hop and framing headers: recomputed per connection, never forwarded.
_HOP = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "content-length",
                  "te", "trailer", "upgrade", "proxy-authorization", "proxy-connection",
                  "accept-encoding", "content-encoding"})


def _forward_headers(headers: Any) -> dict[str, str]:
    # Surrounding whitespace is not part of a header value (RFC 9110 5.5), and httpx
    # refuses to send one: lm-eval sends `Authorization: Bearer ` when no key is set.
    return {k: v.strip() for k, v in headers.items() if k.lower() not in _HOP}


def records_for(path: str, request: dict[str, Any], response: dict[str, Any] | None,
                upstream: str, run: str, frames: list[str] | None = None,
                model: str | None = None, unusable: str | None = None,
                origin: Mapping[str, Any] | None = None) -> bytes:
    """The native record line(s) of one exchange (a batched completion: one per prompt,
    each with the batch's usage); a stream's frames are saved with it as they were sent
    (a streamed batch's are not: its prompts are replayed in small deltas). `model`: the
    model the request's path names (Gemini's), or that of a tokenizer call that names
    none (the upstream's only model); else the request's (or the response's).
    `unusable`: why an exchange that got no answer (a failed batch line, `response`
    None) has none; `origin`: what else its source says (a batch line's batch and
    custom_id)."""
    request = strip_transport(request)
    model = model or request.get("model") or (response or {}).get("model")
    if path == MODELS_PATH and response is not None:  # one model's entry of the list
        model = response.get("id")
    source = {"harness": "replay-server record", "upstream": upstream, "run": run,
              "time": round(time.time(), 3), **(origin or {})}
    if path in NO_GENERATION:
        record = make_record(path, model, request, response, source, "(recording)", None)
        record.source = source
        return dump_line(record)
    lines = []
    for part_request, part_response, batch in family_of(path).split(request, response,
                                                                    uuid.uuid4().hex):
        record = make_record(path, model, part_request, part_response, source,
                             "(recording)", None, unusable, batch=batch,
                             stream=frames if batch is None else None)
        record.source = source  # file and line are where the reader finds the line
        lines.append(dump_line(record))
    return b"".join(lines)


class Recorder:
    """`pass_keys`: the client's credentials go upstream (`record`); else (the judge path)
    none does, and the upstream gets `upstream_key`, if any, in its API's form."""

    def __init__(self, upstream: str, writer: RecordWriter, *, upstream_key: str | None = None,
                 pass_keys: bool = True) -> None:
        # The URL's credentials (userinfo, a `key=` parameter) reach the upstream with
        # every request (userinfo as basic auth: `headers`); `upstream`, the URL that is
        # saved and printed, has none of them.
        parts = urlsplit(upstream)
        self._basic = basic_auth(upstream)
        self._base = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2],
                                 parts.path.rstrip("/").removesuffix("/v1"), "", ""))
        self._params = parts.query
        self.upstream = shown(self._base + (f"?{parts.query}" if parts.query else ""))
        self.writer = writer
        self.upstream_key = upstream_key
        self.pass_keys = pass_keys
        self.run = f"record-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.counts: Counter[str] = Counter()
        self._model: str | None = None  # the upstream's only model ("": several)
        self._listed: dict[str, bytes] = {}  # each model's entry saved last (`_identity`)
        self.client = httpx.AsyncClient(base_url=self._base, params=self._params,
                                        timeout=httpx.Timeout(None, connect=10.0))
        self.batches = BatchRecorder(self)

    @property
    def base(self) -> str:
        """The upstream's root URL (no `/v1`, no credentials), as it names its own pages."""
        return self._base

    def summary(self) -> str:
        c = self.counts
        pending = self.batches.pending()
        return (f"recorded {c['recorded']} exchanges ({c['records']} records) to "
                f"{self.writer.path}; forwarded without saving: {c['forwarded']}; "
                f"upstream errors: {c['upstream_error']}, abandoned by "
                f"the client: {c['abandoned']}, failed streams: {c['aborted']}, not "
                f"recordable: {c['unrecordable']}"
                + (f"; {pending} batch lines whose results never came through the "
                   "recorder (not saved)" if pending else ""))

    def tally(self, outcome: str, why: str = "", hook: Outcome | None = None) -> None:
        """Count one exchange's outcome, and tell the exchange's hook."""
        self.counts[outcome] += 1
        if hook is not None:
            hook(outcome, why)

    async def _only_model(self) -> str | None:
        """The upstream's one model (`GET /v1/models`, asked once), for a tokenizer call
        that names none (vLLM answers those with its served model); None when it serves
        several, or none can be read."""
        if self._model is None:
            try:
                listed = (await self.client.get("/v1/models")).json()["data"]
                self._model = listed[0]["id"] if len(listed) == 1 else ""
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
                return None  # (asked again next time: the upstream may be starting)
        return self._model or None

    async def _save_models(self, answer: dict[str, Any], hook: Outcome | None) -> None:
        """`GET /v1/models`: each model's entry (what it says of `max_model_len`), as a
        record of that model, once, and again when it changes (a readiness probe polls
        the list: a line a poll would grow the file without end); an answer of another
        shape is forwarded, not saved."""
        listed = answer.get("data")
        entries = [e for e in listed if isinstance(e, dict) and isinstance(e.get("id"), str)
                   and e["id"]] if isinstance(listed, list) else []
        if not entries:
            self.tally("unrecordable", "the model list has no model entries", hook)
            return
        changed = [e for e in entries if self._listed.get(e["id"]) != _identity(e)]
        for entry in changed:  # (marked before the first await: polls run concurrently)
            self._listed[entry["id"]] = _identity(entry)
        if not changed:
            self.tally("forwarded", "", hook)
        for entry in changed:
            await self.save(MODELS_PATH, {}, entry)

    async def save(self, path: str, request: dict[str, Any], response: dict[str, Any] | None,
                   frames: list[str] | None = None, hook: Outcome | None = None,
                   model: str | None = None, unusable: str | None = None,
                   origin: Mapping[str, Any] | None = None) -> None:
        """Save one exchange (`model`: the one its path names, if it does; `unusable` and
        `origin`: `records_for`'s)."""
        if path in TOKENIZER_ENDPOINTS and not request.get("model"):
            model = await self._only_model()
            if model is None:
                log.warning("not recorded (%s): the call names no model, and the upstream's "
                            "/v1/models does not list exactly one to save it under", path)
                self.tally("unrecordable", "the call names no model", hook)
                return
        try:
            lines = records_for(path, request, response, self.upstream, self.run, frames,
                                model, unusable, origin)
        except (LoadError, ValueError) as e:
            log.warning("not recorded (%s): %s", path, e)
            self.tally("unrecordable", f"the answer cannot be saved: {e}", hook)
            return
        await self.writer.append(lines)
        self.counts["records"] += lines.count(b"\n")
        self.tally("recorded", "", hook)

    async def forward(self, request: Request) -> Response:
        return await self.exchange(request.method, request.url.path, request.headers,
                                   str(request.query_params), await request.body(),
                                   request.receive)

    def headers(self, client: Mapping[str, str], family: Family) -> dict[str, str]:
        """The headers sent upstream: the client's, less hop-by-hop ones; on the judge path,
        less every one that can carry a key, and with the upstream's key in the form its
        API reads (`family`'s `credential`). The upstream URL's userinfo goes as basic
        auth, in place of the client's `Authorization` (under `record`: the URL is the
        operator's own setting, a harness's key often a stand-in), but never in place of
        --upstream-api-key (an explicit key for the judge, which it beats)."""
        headers = _forward_headers(client)
        if not self.pass_keys:
            headers = without_keys(headers)
            if self.upstream_key is not None:
                name, value = family.credential(self.upstream_key)
                headers[name] = value
        if self._basic is not None and (self.pass_keys or self.upstream_key is None):
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            headers["authorization"] = self._basic
        headers["accept-encoding"] = "identity"
        return headers

    def _request(self, method: str, path: str, client_headers: Mapping[str, str],
                 params: str, body: bytes, family: Family) -> httpx.Request:
        """The request sent upstream (on the judge path, its query less every key-like
        parameter)."""
        if not self.pass_keys:
            params = query_without_keys(params)
        return self.client.build_request(method, path, content=body, params=params,
                                         headers=self.headers(client_headers, family))

    async def exchange(self, method: str, path: str, client_headers: Mapping[str, str],
                       params: str, body: bytes, receive: Receive,
                       hook: Outcome | None = None) -> Response:
        """Forward one request, whose body was read whole; a replay endpoint's answer that
        reaches the client whole is saved before its end goes out. `receive` tells when
        the client leaves; `hook` hears the outcome."""
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1"))
               for k, v in client_headers.items()]
        # the replay endpoint it goes to (its template path: Gemini's names the model), and
        # the fields its path carries, which are not saved in the request but read
        routed = endpoint_for(path, params)
        endpoint, fields = (routed[0].path, routed[1]) if routed is not None else (None, {})
        family = routed[0] if routed is not None else family_for(path, raw, params)
        parsed = _json_object(body)
        if parsed is not None and endpoint is not None:  # (its headers that are fields)
            parsed = family.with_headers(parsed, raw)
        gone = asyncio.Event()
        watcher = asyncio.create_task(watch_disconnect(receive, gone))
        try:
            reply = await unless_gone(self.client.send(self._request(
                method, path, client_headers, params, body, family), stream=True), gone)
        except httpx.HTTPError as e:
            watcher.cancel()
            self.tally("upstream_error", f"unreachable: {type(e).__name__}: {e}", hook)
            return _unreachable(self.upstream, e, family.error_body)
        if reply is None:
            watcher.cancel()
            return self._abandoned(path, hook)
        out_headers = _forward_headers(reply.headers)
        no_generation = path in NO_GENERATION and method == \
            ("POST" if path in (TOKENIZE_PATH, DETOKENIZE_PATH) else "GET")
        if no_generation and method == "GET":
            parsed = {}  # (no body, and a request of no fields)
        recordable = (method == "POST" and endpoint is not None or no_generation) \
            and parsed is not None and reply.status_code == 200
        if recordable and parsed is not None and fields.get(
                "stream", parsed.get("stream")) is True:
            watcher.cancel()  # the relay watches the client itself
            return Relay(self, endpoint or path, parsed, reply, out_headers, hook,
                         fields.get("model"))
        try:
            content = await unless_gone(reply.aread(), gone)
        except httpx.HTTPError as e:
            watcher.cancel()
            self.tally("upstream_error", f"broken answer: {type(e).__name__}: {e}", hook)
            return _unreachable(self.upstream, e, family.error_body)
        finally:
            await reply.aclose()
        watcher.cancel()
        if content is None or gone.is_set():
            return self._abandoned(path, hook)
        if not recordable:
            if endpoint is not None and method == "POST":
                if reply.status_code != 200:
                    self.tally("upstream_error", f"HTTP {reply.status_code}: "
                               f"{content[:200].decode('utf-8', 'replace')}", hook)
                else:
                    self.tally("unrecordable", "the request is not a JSON object", hook)
            else:
                self.tally("forwarded", "", hook)
        elif (answer := _json_object(content)) is None:
            self.tally("unrecordable", "the answer is not a JSON object", hook)
        elif path == MODELS_PATH:
            await self._save_models(answer, hook)
        else:
            await self.save(endpoint or path, parsed or {}, answer, hook=hook,
                             model=fields.get("model"))
        return Response(content, reply.status_code, out_headers)

    def _abandoned(self, path: str, hook: Outcome | None) -> Response:
        """The client left before its answer was complete: nothing is saved."""
        log.info("not recorded (%s): the client left before the answer was complete", path)
        self.tally("abandoned", "the client left before the answer was complete", hook)
        return Response(status_code=499)

    async def save_stream(self, path: str, request: dict[str, Any],
                          aggregator: Aggregator, frames: Frames, ended: bool = False,
                          hook: Outcome | None = None, model: str | None = None) -> bool:
        """Save a finished stream, with its frames as sent; once begun, the save completes
        even if cancelled. `ended`: the upstream's body ended cleanly before its end marker
        (`[DONE]`): the stream is then whole if its family says so (a chat or completion
        stream: each choice the request asked for came with its finish_reason,
        `Family.unfinished`; a Responses stream needs its terminal event all the same)."""
        try:
            response = aggregator.result(ended)
            if ended and (short := family_of(path).unfinished(request, response)):
                raise StreamError(short)
        except StreamError as e:
            log.warning("stream not recorded (%s): %s", path, e)
            return False
        texts = frames.texts()
        if texts is None:
            log.warning("stream (%s) saved without its frames: they are not UTF-8", path)
        await asyncio.shield(self.save(path, request, response, texts, hook, model))
        return True

    def probe(self, timeout: float = 5.0) -> str | None:
        """Why the upstream cannot be reached, or None: `GET /v1/models` there, where any
        answer at all (a 401 or a 404 too) says that a server listens."""
        try:
            httpx.get(f"{self._base}/v1/models", params=self._params, timeout=timeout,
                      headers=self.headers({}, family_for(MODELS_PATH, [])))
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}"
        return None

    def serves(self, family: Family, timeout: float = 5.0) -> bool | None:
        """Whether the upstream has `family`'s API (None: it cannot be reached): its probe
        (`Family.probe`; else a POST of `{}` to its endpoint, a request no server
        generates for) answered with anything but 404 or 405 (a 400 or a 401 says the
        route is there)."""
        method, path = family.probe or ("POST", family.path)
        try:
            reply = httpx.request(method, f"{self._base}{path}", params=self._params,
                                  json={} if method == "POST" else None, timeout=timeout,
                                  headers=self.headers({}, family))
        except httpx.HTTPError:
            return None
        return reply.status_code not in (404, 405)

    async def close(self) -> None:
        await self.client.aclose()


# What a model list entry says of the time of its answer, not of the model: vLLM stamps
# `created` with the time of each request, and gives each answer a fresh `permission` (a
# new id and time).
_ANSWER_TIME = ("created", "permission")


def _identity(entry: dict[str, Any]) -> bytes:
    """What a model's entry says of the model: equal for two answers of one unchanged
    model."""
    return orjson.dumps({k: v for k, v in entry.items() if k not in _ANSWER_TIME},
                        option=orjson.OPT_SORT_KEYS)


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None




def _error_response(error: errors.ReplayServerError, envelope: Envelope) -> Response:
    """The recorder's own error, rendered as every error is (`errors.render`), in the
    envelope of the request's API family."""
    status, headers, body = errors.render(error, envelope)
    return Response(body, status, {k.decode(): v.decode() for k, v in headers
                                   if k != b"content-length"})


def _unreachable(upstream: str, error: Exception, envelope: Envelope) -> Response:
    """502 in the request's family's envelope. Unlike a replay error, retrying this can
    succeed, so it does not say `x-should-retry: false` (`BadGateway.retryable`)."""
    return _error_response(errors.BadGateway(
        f"the recorder could not reach the upstream server {upstream}: "
        f"{type(error).__name__}: {error}"), envelope)


async def _unexpected(request: Request, exc: Exception) -> Response:
    """The recorder's own failure (a full disk), in the request's family's envelope
    (uvicorn logs the traceback)."""
    error = errors.ReplayServerError(f"internal error in the replay-server recorder: "
                                     f"{type(exc).__name__}: {exc}; see its log")
    return _error_response(error, error_body_of(request.url.path, request.scope["headers"],
                                                request.url.query))


def create_record_app(recorder: Recorder) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await recorder.close()

    app = FastAPI(title="replay-server recorder", version=__version__, lifespan=lifespan)
    app.state.recorder = recorder
    app.add_exception_handler(Exception, _unexpected)

    async def forward(request: Request) -> Response:
        return await recorder.forward(request)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/record/status")
    async def status() -> Response:
        return Response(orjson.dumps({**recorder.counts, "file": str(recorder.writer.path)}),
                        media_type="application/json")

    async def other(request: Request) -> Response:
        if request.url.path.startswith(BATCH_PATHS):
            return await recorder.batches.forward(request)
        return await recorder.forward(request)

    # Everything else goes to the upstream, whatever the path and method: only the replay
    # endpoints' answers are saved, and each line of a batch (`batch_recorder`).
    for path in ENDPOINTS:
        app.add_api_route(path, forward, methods=["POST"], include_in_schema=True)
    app.add_api_route("/{path:path}", other, methods=_METHODS, include_in_schema=False)
    return app


_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
