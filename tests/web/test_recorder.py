"""The recording proxy: record through it, then replay the recording and get the same run."""

from __future__ import annotations

import asyncio
import http.client
import itertools
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from replay_server.index.loading import load
from replay_server.paths import CHAT_PATH
from replay_server.saved.writer import RecordWriter
from replay_server.web.recorder import Recorder, create_record_app
from tests.fakemodel.server import create_app as fake_model
from tests.support import Counting, free_port, running, serving, spawn, wait_for

pytestmark = pytest.mark.http
MODEL = "tiny-model"


def question(i: int) -> list[Any]:
    return [{"role": "user", "content": f"What is {i} + {i + 3}?"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running(fake_model([MODEL])) as url:
        yield url


@pytest.fixture
def recorder(upstream: str, tmp_path: Path) -> Iterator[tuple[str, Recorder]]:
    rec = Recorder(upstream, RecordWriter(tmp_path / "run.jsonl"))
    with running(create_record_app(rec)) as url:
        yield url, rec
    rec.writer.close()


def chat_dump(r: Any) -> list[dict[str, Any]]:
    return [c.model_dump() for c in r.choices]


def streamed(stream: Any) -> dict[int, dict[str, Any]]:
    """Per choice index: the content, reasoning and finish_reason a stream carried."""
    out: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        for c in chunk.choices:
            got = out.setdefault(c.index, {"content": "", "reasoning": "", "finish": None})
            delta = getattr(c, "delta", None)
            if delta is not None:
                got["content"] += delta.content or ""
                got["reasoning"] += (delta.model_extra or {}).get("reasoning") or ""
            else:
                got["content"] += c.text
            got["finish"] = c.finish_reason or got["finish"]
    return out


def session(client: openai.OpenAI) -> dict[str, Any]:
    """One harness-like session: chat, n=2, sampled repeats, streams, a completion batch."""
    out: dict[str, Any] = {}
    out["chat"] = chat_dump(client.chat.completions.create(model=MODEL, messages=question(1)))
    out["n2"] = chat_dump(client.chat.completions.create(model=MODEL, messages=question(2),
                                                         n=2, temperature=0.8))
    out["repeats"] = [chat_dump(client.chat.completions.create(
        model=MODEL, messages=question(3), temperature=0.8)) for _ in range(3)]
    out["length"] = chat_dump(client.chat.completions.create(model=MODEL, messages=question(4),
                                                             max_tokens=3))
    out["stream"] = streamed(client.chat.completions.create(
        model=MODEL, messages=question(5), n=2, stream=True,
        stream_options={"include_usage": True}))
    batch = client.completions.create(model=MODEL, prompt=[f"What is {i} + 1?" for i in range(3)],
                                      max_tokens=12, stop=["\n"])
    out["batch"] = [c.model_dump() for c in batch.choices]
    out["completion_stream"] = streamed(client.completions.create(
        model=MODEL, prompt="What is 9 + 9?", max_tokens=8, stream=True))
    return out


def test_record_then_replay_gives_identical_answers(recorder: tuple[str, Recorder],
                                                    tmp_path: Path) -> None:
    url, rec = recorder
    with openai.OpenAI(base_url=url, api_key="sk-secret-not-saved") as client:
        original = session(client)
    assert (rec.counts["recorded"], rec.counts["records"]) == (9, 11)
    assert len(set(map(str, original["repeats"]))) > 1, "the repeats should differ"
    with serving([tmp_path / "run.jsonl"]) as replay_url, \
            openai.OpenAI(base_url=replay_url, api_key="x") as client:
        replayed = session(client)
    assert replayed == original
    assert b"sk-secret-not-saved" not in (tmp_path / "run.jsonl").read_bytes()


def test_a_batch_of_one_prompt_is_saved_and_replays_identically(
        recorder: tuple[str, Recorder], tmp_path: Path) -> None:
    """lm-eval's last batch of a document's perplexity windows (or of any loglikelihood
    requests) is often one prompt in a list: `[[ids]]`, or `["text"]` as text."""
    url, rec = recorder

    def calls(client: openai.OpenAI) -> list[dict[str, Any]]:
        return [client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, echo=True,
                                          logprobs=1, temperature=0).model_dump(
            exclude={"id", "created"}) for prompt in ([[11, 12, 13]], ["What is 2 + 2?"])]

    with openai.OpenAI(base_url=url, api_key="x") as client:
        original = calls(client)
    assert (rec.counts["recorded"], rec.counts["records"]) == (2, 2)
    with serving([tmp_path / "run.jsonl"]) as replay_url, \
            openai.OpenAI(base_url=replay_url, api_key="x") as client:
        assert calls(client) == original


def test_streams_are_saved_with_reasoning_usage_and_finish_reason(
        recorder: tuple[str, Recorder], tmp_path: Path) -> None:
    with openai.OpenAI(base_url=recorder[0], api_key="x") as client:
        plain = client.chat.completions.create(model=MODEL, messages=question(7), n=3,
                                               temperature=0)
        streamed_body = streamed(client.chat.completions.create(
            model=MODEL, messages=question(7), n=3, temperature=0, stream=True,
            stream_options={"include_usage": True}))
    assert {i: (c.message.content, c.finish_reason) for i, c in enumerate(plain.choices)} == {
        i: (s["content"], s["finish"]) for i, s in streamed_body.items()}
    lines = (tmp_path / "run.jsonl").read_bytes().splitlines()
    saved = [orjson.loads(line)["response"] for line in lines]

    def essentials(choice: dict[str, Any]) -> tuple[Any, ...]:
        message = choice["message"]
        return (choice["index"], message["role"], message["content"],
                message.get("reasoning"), choice["finish_reason"])

    assert [essentials(c) for c in saved[1]["choices"]] == [
        essentials(c) for c in saved[0]["choices"]]
    assert any(c["message"].get("reasoning") for c in saved[1]["choices"])
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [saved[1]["usage"][k] for k in counts] == [saved[0]["usage"][k] for k in counts]
    assert saved[1]["object"] == "chat.completion"


def test_upstream_errors_pass_through_unrecorded(recorder: tuple[str, Recorder],
                                                 tmp_path: Path) -> None:
    url, rec = recorder
    r = httpx.post(url + "/chat/completions", json={"model": MODEL})
    assert r.status_code == 400 and "messages" in r.text
    assert rec.counts["upstream_error"] == 1
    assert (tmp_path / "run.jsonl").read_bytes() == b""


def test_record_passes_the_clients_own_key_on_and_never_saves_it(tmp_path: Path) -> None:
    """`record` stands in for the server its client means to call: the client's key is its
    own, for that server, and reaches it as sent (header or query); it is never saved."""
    upstream = Counting(fake_model([MODEL]))
    with running(upstream) as up:
        rec = Recorder(up, RecordWriter(tmp_path / "run.jsonl"))
        with running(create_record_app(rec)) as url, openai.OpenAI(
                base_url=url, api_key="sk-real", default_headers={"x-api-key": "x-real"}
                ) as client:
            client.chat.completions.create(model=MODEL, messages=question(1),
                                           extra_query={"key": "q-real"})
        rec.writer.close()
    (headers, query), = upstream.heard
    assert ("authorization", "Bearer sk-real") in headers and ("x-api-key", "x-real") in headers
    assert query == "key=q-real"
    saved = (tmp_path / "run.jsonl").read_text()
    assert saved.count("\n") == 1 and not any(k in saved for k in ("sk-real", "x-real", "q-real"))


def test_credentials_in_the_upstream_url_are_used_and_never_saved(tmp_path: Path) -> None:
    """`--upstream http://user:secret@host/v1?key=...`: the upstream gets them (basic auth,
    the query), and the URL each record saves (and the recorder prints) has none."""
    upstream = Counting(fake_model([MODEL]))
    with running(upstream) as up:
        host = up.removeprefix("http://").removesuffix("/v1")
        rec = Recorder(f"http://user:pw-secret@{host}/v1?key=q-secret&api-version=2",
                       RecordWriter(tmp_path / "run.jsonl"))
        with running(create_record_app(rec)) as url, openai.OpenAI(base_url=url,
                                                                  api_key="x") as client:
            client.chat.completions.create(model=MODEL, messages=question(1))
        rec.writer.close()
    (headers, query), = upstream.heard
    assert ("authorization", "Basic dXNlcjpwdy1zZWNyZXQ=") in headers  # user:pw-secret
    assert query == "key=q-secret&api-version=2"
    saved = (tmp_path / "run.jsonl").read_text()
    assert orjson.loads(saved)["source"]["upstream"] == f"http://{host}?api-version=2"
    assert rec.upstream == f"http://{host}?api-version=2"
    assert not any(k in saved + rec.summary() for k in ("pw-secret", "q-secret"))


@pytest.mark.parametrize("judge", [False, True])
def test_the_url_s_basic_auth_beats_a_client_s_key_and_never_the_judge_s(
        tmp_path: Path, judge: bool) -> None:
    """One `Authorization` goes upstream. Under `record` the URL's `user:password` (the
    operator's setting) replaces the client's key (a harness's is often a stand-in); on
    the judge path --upstream-api-key is the explicit key, and the URL's never replaces
    it (httpx would have put basic auth in its place, silently)."""
    upstream = Counting(fake_model([MODEL]))
    with running(upstream) as up:
        host = up.removeprefix("http://").removesuffix("/v1")
        rec = Recorder(f"http://user:pw-secret@{host}/v1", RecordWriter(tmp_path / "run.jsonl"),
                       upstream_key="sk-judge" if judge else None, pass_keys=not judge)
        with running(create_record_app(rec)) as url, openai.OpenAI(base_url=url,
                                                                  api_key="sk-own") as client:
            client.chat.completions.create(model=MODEL, messages=question(1))
        rec.writer.close()
    (headers, _), = upstream.heard
    sent = [v for k, v in headers if k == "authorization"]
    assert sent == ["Bearer sk-judge" if judge else "Basic dXNlcjpwdy1zZWNyZXQ="]


def test_models_are_forwarded(recorder: tuple[str, Recorder]) -> None:
    with openai.OpenAI(base_url=recorder[0], api_key="x") as client:
        models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def vllm_models(lengths: list[int]) -> Starlette:
    """An upstream whose `/v1/models` answers as vLLM's does: `created` the time of the
    answer and a fresh permission each time; the n-th answer's `max_model_len` is
    `lengths[n]`."""
    calls = itertools.count()

    async def models(request: Request) -> JSONResponse:
        n = next(calls)
        return JSONResponse({"object": "list", "data": [{
            "id": MODEL, "object": "model", "created": 1000 + n, "owned_by": "vllm",
            "root": MODEL, "parent": None, "max_model_len": lengths[n],
            "permission": [{"id": f"modelperm-{n}", "object": "model_permission",
                            "created": 1000 + n}]}]})

    return Starlette(routes=[Route("/v1/models", models)])


def test_a_polled_model_list_saves_each_entry_once_and_again_when_it_changes(
        tmp_path: Path) -> None:
    """A readiness probe polls `/v1/models`: a model's entry is saved once, and again only
    when what it says of the model changes (not its answer's time)."""
    out = tmp_path / "run.jsonl"
    with running(vllm_models([4096, 4096, 4096, 8192, 8192])) as up:
        rec = Recorder(up, RecordWriter(out))
        with running(create_record_app(rec)) as url:
            for _ in range(5):
                assert httpx.get(url + "/models").json()["data"][0]["id"] == MODEL
        rec.writer.close()
    saved = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [(r["model"], r["response"]["max_model_len"]) for r in saved] == [
        (MODEL, 4096), (MODEL, 8192)]
    assert (rec.counts["recorded"], rec.counts["forwarded"]) == (2, 3)


@pytest.mark.slow
async def test_concurrent_exchanges_are_all_saved_whole(recorder: tuple[str, Recorder],
                                                        tmp_path: Path) -> None:
    async def one(client: openai.AsyncOpenAI, i: int) -> str:
        if i % 2:
            stream = await client.chat.completions.create(model=MODEL, messages=question(100 + i),
                                                          stream=True)
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        r = await client.chat.completions.create(model=MODEL, messages=question(100 + i))
        return r.choices[0].message.content or ""

    async with openai.AsyncOpenAI(base_url=recorder[0], api_key="x") as client:
        answers = await asyncio.gather(*(one(client, i) for i in range(64)))
    lines = (tmp_path / "run.jsonl").read_bytes().splitlines()
    assert len(lines) == 64
    saved = {orjson.loads(line)["request"]["messages"][0]["content"]:
             orjson.loads(line)["response"]["choices"][0]["message"]["content"] for line in lines}
    assert saved == {question(100 + i)[0]["content"]: answers[i] for i in range(64)}


def test_a_cut_last_line_from_a_crash_is_set_aside_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"complete": 1}\n{"cut sh')
    writer = RecordWriter(path)
    writer.close()
    assert path.read_bytes() == b'{"complete": 1}\n'
    assert writer.set_aside is not None and writer.set_aside.read_bytes() == b'{"cut sh'


def test_two_recorders_cannot_write_one_file(tmp_path: Path) -> None:
    first = RecordWriter(tmp_path / "run.jsonl")
    with pytest.raises(Exception, match="another recorder"):
        RecordWriter(tmp_path / "run.jsonl")
    first.close()


@pytest.mark.slow
def test_sigkill_loses_no_acknowledged_exchange_and_leaves_no_torn_line(
        upstream: str, tmp_path: Path) -> None:
    out = tmp_path / "killed.jsonl"
    acknowledged: list[str] = []
    lock = threading.Lock()

    def client(url: str, worker: int) -> None:
        with httpx.Client(timeout=10) as http:
            for i in range(1000):
                content = f"What is {worker} + {i}?"
                body = {"model": MODEL, "messages": [{"role": "user", "content": content}],
                        "stream": i % 2 == 0}
                try:
                    r = http.post(url + "/chat/completions", json=body)
                    complete = r.status_code == 200 and (
                        not body["stream"] or r.text.endswith("data: [DONE]\n\n"))
                except httpx.HTTPError:
                    return
                if complete:
                    with lock:
                        acknowledged.append(content)

    with spawn("record", "--upstream", upstream, "--out", str(out), "--log-level",
               "warning") as recording:
        workers = [threading.Thread(target=client, args=(recording.url, w)) for w in range(16)]
        for w in workers:
            w.start()
        wait_for(lambda: len(acknowledged) >= 200 or recording.proc.poll() is not None)
        assert recording.proc.poll() is None, "the recorder died on its own"
        recording.stop(signal.SIGKILL)
        for w in workers:
            w.join(30)
    data = out.read_bytes()
    assert data.endswith(b"\n"), "a torn last line"
    saved = {orjson.loads(line)["request"]["messages"][0]["content"]
             for line in data.splitlines()}
    assert set(acknowledged) <= saved
    assert load([out], progress=False).index.models[MODEL].records == len(saved)


def test_header_values_are_forwarded_without_surrounding_spaces(
        recorder: tuple[str, Recorder], tmp_path: Path) -> None:
    """lm-eval sends `Authorization: Bearer ` (no key set); httpx refuses to send that."""
    host, port = recorder[0].removeprefix("http://").removesuffix("/v1").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions",
                     headers={"Authorization": "Bearer ", "Content-Type": "application/json"},
                     body=orjson.dumps({"model": MODEL, "messages": question(40)}))
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    assert recorder[1].counts["recorded"] == 1


def test_an_unreachable_upstream_is_a_502_in_the_envelope(tmp_path: Path) -> None:
    port = free_port()
    rec = Recorder(f"http://user:pw-secret@127.0.0.1:{port}/v1?key=q-secret",
                   RecordWriter(tmp_path / "run.jsonl"))
    with running(create_record_app(rec)) as url:
        r = httpx.post(url + "/chat/completions", json={"model": MODEL, "messages": question(1)})
    rec.writer.close()
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "BadGatewayError" and r.json()["error"]["code"] == 502
    assert "x-should-retry" not in r.headers
    assert f"the upstream server http://127.0.0.1:{port}:" in r.json()["error"]["message"]
    assert "secret" not in r.text


@pytest.mark.slow
def test_record_says_at_start_that_the_upstream_is_unreachable_and_records_once_it_is_up(
        tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "late.jsonl"
    with spawn("record", "--upstream", f"http://127.0.0.1:{port}/v1", "--out", str(out),
               "--log-level", "warning") as recording:
        assert f"cannot reach the upstream http://127.0.0.1:{port}" in recording.output
        assert "keeps serving" in recording.output
        r = httpx.post(recording.url + "/chat/completions",
                       json={"model": MODEL, "messages": question(1)}, timeout=30)
        assert r.status_code == 502
        config = uvicorn.Config(fake_model([MODEL]), host="127.0.0.1", port=port,
                                log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            wait_for(lambda: server.started)
            with openai.OpenAI(base_url=recording.url, api_key="x") as client:
                answer = client.chat.completions.create(model=MODEL, messages=question(1))
        finally:
            server.should_exit = True
            thread.join(10)
    assert orjson.loads(out.read_bytes())["response"]["choices"][0]["message"]["content"] \
        == answer.choices[0].message.content


def test_record_says_nothing_of_the_kind_when_the_upstream_answers(upstream: str,
                                                                  tmp_path: Path) -> None:
    with spawn("record", "--upstream", upstream, "--out", str(tmp_path / "r.jsonl")) as rec:
        assert "cannot reach" not in rec.output
        assert f"forwarding to {upstream.removesuffix('/v1')}" in rec.output


def _chunk(*choices: dict[str, Any], usage: Any = None, kind: str = "chat.completion.chunk"
           ) -> bytes:
    body = {"id": "c9", "object": kind, "created": 1, "model": MODEL, "choices": list(choices)}
    if usage is not None:
        body["usage"] = usage
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _delta(index: int, text: str, finish: str | None = None) -> dict[str, Any]:
    return {"index": index, "delta": {"content": text}, "finish_reason": finish}


USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
# Streams whose upstream closes the body cleanly without `data: [DONE]`: (path, request
# extras, frames, whether the client received it whole)
NO_DONE = {
    "chat, every choice finished": (CHAT_PATH, {"n": 2}, [
        _chunk(_delta(0, "Hi"), _delta(1, "Yo")), _chunk(_delta(0, " there", "stop")),
        _chunk(_delta(1, "!", "length")), _chunk(usage=USAGE)], True),
    "completion, finished": ("/v1/completions", {}, [
        _chunk({"index": 0, "text": " Paris", "finish_reason": None}, kind="text_completion"),
        _chunk({"index": 0, "text": ".", "finish_reason": "stop"}, kind="text_completion")],
        True),
    "chat, cut before its finish_reason": (CHAT_PATH, {}, [_chunk(_delta(0, "Hi"))], False),
    "chat, one of two choices finished": (CHAT_PATH, {"n": 2}, [
        _chunk(_delta(0, "Hi"), _delta(1, "Yo")), _chunk(_delta(0, "!", "stop"))], False),
    "chat, the second choice never came": (CHAT_PATH, {"n": 2}, [
        _chunk(_delta(0, "Hi", "stop"))], False),
}


def no_done_upstream(frames: list[bytes]) -> Starlette:
    async def answer(request: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            for frame in frames:
                yield frame
        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route(path, answer, methods=["POST"])
                             for path in (CHAT_PATH, "/v1/completions")])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(NO_DONE))
def test_a_stream_received_whole_without_done_is_saved_and_replayed_as_sent(
        tmp_path: Path, case: str) -> None:
    path, extra, frames, whole = NO_DONE[case]
    body: dict[str, Any] = {"model": MODEL, "stream": True, **extra}
    body.update({"messages": question(9)} if path == CHAT_PATH else {"prompt": "France's?"})
    if "usage" in case or any(b'"usage"' in f for f in frames):
        body["stream_options"] = {"include_usage": True}
    out = tmp_path / "run.jsonl"
    with running(no_done_upstream(frames)) as up:
        rec = Recorder(up, RecordWriter(out))
        with running(create_record_app(rec)) as url:
            with openai.OpenAI(base_url=url, api_key="x") as client:
                create = client.chat.completions.create if path == CHAT_PATH \
                    else client.completions.create
                received = streamed(create(**{k: v for k, v in body.items()
                                              if k != "stream"}, stream=True))
        rec.writer.close()
    assert len(received) == (1 if "second" in case else extra.get("n", 1))
    if not whole:
        assert out.read_bytes() == b"" and rec.counts["aborted"] == 1
        return
    assert rec.counts["recorded"] == 1 and rec.counts["aborted"] == 0
    saved = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert saved[0]["stream"] == [f.decode() for f in frames]  # no invented [DONE]
    with serving([out]) as replay:
        replayed = httpx.post(replay.removesuffix("/v1") + path, json=body, timeout=20)
        with openai.OpenAI(base_url=replay, api_key="x") as client:
            create = client.chat.completions.create if path == CHAT_PATH \
                else client.completions.create
            again = streamed(create(**{k: v for k, v in body.items() if k != "stream"},
                                    stream=True))
    assert replayed.status_code == 200 and replayed.content == b"".join(frames)
    assert again == received
    assert {c["finish_reason"] for c in saved[0]["response"]["choices"]} == {
        s["finish"] for s in received.values()}
