"""The judge path (`--upstream URL --out FILE`): a model the saved runs lack goes upstream
and is saved; a saved model never does; the next rescoring replays the judge."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from replay_server.commands.serve import open_run
from replay_server.paths import MESSAGES_PATH
from replay_server.settings import Settings
from replay_server.web.app import create_app
from replay_server.web.upstream import recorder_for
from tests.fakemodel.server import create_app as fake_model
from tests.support import (
    Counting,
    assert_error,
    chat_record,
    chat_response,
    free_port,
    running,
    write_jsonl,
)

pytestmark = pytest.mark.http
CANDIDATE = "test/model"
JUDGE = "judge-model"
SAVED_PROMPT = "What is 2 + 3?"
GRADE = "[Submission]: The answer is 5. *** [Criterion]: 5 *** GRADE: $LETTER"


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "candidate.jsonl",
                       [chat_record(SAVED_PROMPT, chat_response("The answer is 5."))])


@pytest.fixture
def wire(tmp_path: Path) -> Path:
    """What the upstream was asked, one JSON line per request (the fake model's log)."""
    return tmp_path / "upstream-wire.jsonl"


@pytest.fixture
def judge(wire: Path) -> Iterator[str]:
    with running(fake_model([JUDGE], log_path=str(wire))) as url:
        yield url


@contextmanager
def replaying(paths: list[Path], **settings: Any) -> Iterator[tuple[openai.OpenAI, Any]]:
    """The replay server as `serve` builds it (with its upstream when asked), on a real
    uvicorn; an openai client for it, and the app."""
    chosen = Settings(**settings)
    opened = open_run(paths, chosen)
    recorder = recorder_for(chosen)
    app = create_app(chosen, opened.index, recorder)
    try:
        with running(app) as url, openai.OpenAI(base_url=url, api_key="replay",
                                                max_retries=0) as client:
            yield client, app
    finally:
        if recorder is not None:
            recorder.writer.close()


def ask(client: openai.OpenAI, model: str, text: str, **kw: Any) -> str | None:
    reply = client.chat.completions.create(model=model, messages=[{"role": "user",
                                                                   "content": text}], **kw)
    content: str | None = reply.choices[0].message.content
    return content


def asked(wire: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in wire.read_text().splitlines()] if wire.exists() else []


def test_a_judge_goes_upstream_is_saved_and_replays_the_next_time(
        saved: Path, judge: str, wire: Path, tmp_path: Path) -> None:
    out = tmp_path / "judge.jsonl"
    with replaying([saved], upstream=judge, out=str(out)) as (client, app):
        assert ask(client, CANDIDATE, SAVED_PROMPT) == "The answer is 5."
        verdict = ask(client, JUDGE, GRADE, temperature=0)
        status = httpx.get(str(client.base_url).removesuffix("/v1/") + "/replay/status").json()
    assert verdict is not None and verdict.endswith("GRADE: C")
    assert [r["request"]["model"] for r in asked(wire)] == [JUDGE]
    assert status["forwarded"] == {JUDGE: {"saved": 1}}
    assert status["models"][CANDIDATE]["hits"] == 1
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["model"] == JUDGE and record["source"]["upstream"] in judge
    # the next rescoring: no upstream, the judge replays like any saved model
    wire.unlink()
    with replaying([saved, out]) as (client, _):
        assert ask(client, JUDGE, GRADE, temperature=0) == verdict
        with pytest.raises(openai.BadRequestError) as changed_prompt:
            ask(client, JUDGE, GRADE.replace("5.", "6."), temperature=0)
        with pytest.raises(openai.NotFoundError):
            ask(client, "another-judge", GRADE, temperature=0)
    assert changed_prompt.value.code == "replay_no_match"
    assert asked(wire) == []


def test_a_saved_models_miss_is_never_forwarded(saved: Path, judge: str, wire: Path,
                                                tmp_path: Path) -> None:
    out = tmp_path / "judge.jsonl"
    with replaying([saved], upstream=judge, out=str(out)) as (client, app):
        with pytest.raises(openai.BadRequestError) as miss:
            ask(client, CANDIDATE, "What is 2 + 4?")
        response = httpx.post(f"{client.base_url}chat/completions", json={
            "model": CANDIDATE, "messages": [{"role": "user", "content": "What is 7 + 1?"}]})
    assert miss.value.code == "replay_no_match"
    assert_error(response, 400, "replay_no_match")
    assert asked(wire) == [] and out.read_bytes() == b""
    assert app.state.replayer.stats.forwarded == {}


def test_an_alias_is_a_saved_model_and_the_patterns_limit_what_goes(
        saved: Path, judge: str, wire: Path, tmp_path: Path) -> None:
    out = tmp_path / "judge.jsonl"
    with replaying([saved], upstream=judge, out=str(out), model_alias=("*=test/model",)) \
            as (client, _):
        with pytest.raises(openai.BadRequestError):
            ask(client, JUDGE, GRADE)  # `*` makes every name the saved model: replayed
    with replaying([saved], upstream=judge, out=str(out), upstream_models="gpt-*,judge-*") \
            as (client, _):
        with pytest.raises(openai.NotFoundError):
            ask(client, "other-model", GRADE)
        ask(client, JUDGE, GRADE)
    assert [r["request"]["model"] for r in asked(wire)] == [JUDGE]


def test_a_streamed_judge_is_saved_with_its_frames_and_replayed_streamed(
        saved: Path, judge: str, tmp_path: Path) -> None:
    out = tmp_path / "judge.jsonl"

    def streamed(client: openai.OpenAI) -> str:
        chunks = client.chat.completions.create(
            model=JUDGE, stream=True, messages=[{"role": "user", "content": GRADE}])
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    with replaying([saved], upstream=judge, out=str(out)) as (client, _):
        live = streamed(client)
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["stream"] and live.endswith("GRADE: C")
    with replaying([saved, out]) as (client, _):
        assert streamed(client) == live


def test_an_upstream_error_passes_through_and_is_counted_not_saved(
        saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "judge.jsonl"

    async def refuse(request: Request) -> Response:
        return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)

    with running(Starlette(routes=[Route("/v1/chat/completions", refuse, methods=["POST"])])) \
            as upstream, replaying([saved], upstream=upstream, out=str(out)) as (client, app):
        with pytest.raises(openai.InternalServerError):
            ask(client, JUDGE, GRADE)
    stats = app.state.replayer.stats
    assert stats.forwarded == {JUDGE: {"upstream_error": 1}}
    assert [f.first["message"] for f in stats.forward_failures.values()] == \
        ['HTTP 503: {"error":{"message":"overloaded"}}']
    assert out.read_bytes() == b""


@pytest.mark.slow
def test_an_answer_saved_but_never_delivered_is_abandoned_not_saved(
        saved: Path, tmp_path: Path) -> None:
    """A client that leaves while its judge's answer is being saved (its timeout fired:
    the harness scores the item as failed) never got it: the attempt is abandoned, and
    `run` fails on it (it was counted saved). The answer stays in --out, written before
    its end could go out, as every recording is."""
    out = tmp_path / "judge.jsonl"
    big = chat_response("GRADE: C " + "x" * 40_000_000)  # its save takes a while

    async def answer(request: Request) -> Response:
        return JSONResponse(big)

    with running(Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])) \
            as upstream, replaying([saved], upstream=upstream, out=str(out)) as (replay, app):
        body = json.dumps({"model": JUDGE, "messages": [{"role": "user", "content": GRADE}]})
        stats = app.state.replayer.stats
        with socket.create_connection(("127.0.0.1", replay.base_url.port)) as client:
            client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(body), body.encode()))
            deadline = time.monotonic() + 60
            while not out.exists() or out.stat().st_size == 0:  # the save has begun
                assert time.monotonic() < deadline
                time.sleep(0.001)
        while not stats.forwarded:  # (its outcome is known once the answer could not go)
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert stats.forwarded == {JUDGE: {"abandoned": 1}}
    assert out.stat().st_size > 40_000_000


# What a client may send that carries a key: none of it is the upstream's to see.
CLIENT_KEYS = {"api-key": "azure-secret", "x-goog-api-key": "goog-secret",
               "x-api-key": "x-secret"}


def credentials(upstream: Counting) -> list[list[tuple[str, str]]]:
    """Per request the upstream got: the headers that can carry a key, and the query."""
    carriers = {"authorization", "x-api-key", "api-key", "x-goog-api-key"}
    return [[(k, v) for k, v in headers if k in carriers] + [("?", query)]
            for headers, query in upstream.heard]


@pytest.mark.parametrize("own_key, client_key, upstream_key, expected", [
    (None, "replay", "sk-judge", [("authorization", "Bearer sk-judge")]),
    (None, "sk-the-clients-own", "sk-judge", [("authorization", "Bearer sk-judge")]),
    ("own-key", "own-key", "sk-judge", [("authorization", "Bearer sk-judge")]),
    ("own-key", "own-key", None, []),
    (None, "sk-the-clients-own", None, []),
])
def test_the_judge_gets_the_upstream_key_and_no_key_the_client_sent(
        saved: Path, tmp_path: Path, own_key: str | None, client_key: str,
        upstream_key: str | None, expected: list[tuple[str, str]]) -> None:
    """Whatever key the client sends (a stand-in, its own, the replay server's), and in
    whichever header or query parameter, the upstream gets --upstream-api-key or none."""
    upstream = Counting(fake_model([JUDGE]))
    out = tmp_path / "judge.jsonl"
    with running(upstream) as url, replaying(
            [saved], upstream=url, out=str(out), api_key=own_key,
            upstream_api_key=upstream_key) as (client, _):
        asking = client.with_options(api_key=client_key, default_headers=CLIENT_KEYS)
        ask(asking, JUDGE, GRADE, extra_query={"key": "q-secret", "api-version": "2"})
    assert credentials(upstream) == [[*expected, ("?", "api-version=2")]]
    written = out.read_text()
    assert written.count("\n") == 1
    assert not any(k in written for k in ("sk-judge", "sk-the-clients-own", "own-key",
                                          *CLIENT_KEYS.values(), "q-secret"))


@pytest.mark.parametrize("headers", [{}, {"X-Api-Key": "own-key"}], ids=["sdk", "x-api-key"])
def test_an_anthropic_judge_gets_the_upstream_key_as_x_api_key(
        saved: Path, tmp_path: Path, headers: dict[str, str]) -> None:
    """The anthropic SDK sends the replay server's own key (as `Authorization: Bearer`
    today, as `X-Api-Key` before 2.x): the judge gets --upstream-api-key instead, as
    Anthropic's API reads it (`x-api-key`), and nothing else that carries a key."""
    upstream = Counting(fake_model([JUDGE]))
    out = tmp_path / "judge.jsonl"
    with running(upstream) as url, replaying(
            [saved], upstream=url, out=str(out), api_key="own-key",
            upstream_api_key="sk-ant-judge") as (client, _), anthropic.Anthropic(
            base_url=str(client.base_url).removesuffix("/v1/"), api_key="own-key",
            default_headers=headers, max_retries=0) as claude:
        reply = claude.messages.create(model=JUDGE, max_tokens=100, messages=[
            {"role": "user", "content": GRADE}])
    assert reply.content[0].type == "text" and reply.content[0].text.endswith("GRADE: C")
    assert credentials(upstream) == [[("x-api-key", "sk-ant-judge"), ("?", "")]]
    assert json.loads(out.read_text())["endpoint"] == MESSAGES_PATH
    assert "own-key" not in out.read_text() and "sk-ant-judge" not in out.read_text()


@pytest.mark.parametrize("settings, message", [
    ({"upstream": "http://127.0.0.1:9"}, "--upstream and --out go together"),
    ({"out": "judge.jsonl"}, "--upstream and --out go together"),
    ({"upstream_api_key": "k"}, "need --upstream"),
    ({"upstream": "http://x", "out": "o", "workers": 2}, "one worker"),
])
def test_upstream_settings_that_cannot_work_are_refused(settings: dict[str, Any],
                                                        message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings(**settings)


def test_the_upstream_key_is_not_in_the_settings_repr() -> None:
    assert "sk-secret" not in repr(Settings(upstream="http://x", out="o",
                                            upstream_api_key="sk-secret"))


def test_an_unreachable_anthropic_judge_is_a_502_in_anthropics_envelope(
        saved: Path, tmp_path: Path) -> None:
    with replaying([saved], upstream=f"http://127.0.0.1:{free_port()}",
                   out=str(tmp_path / "judge.jsonl")) as (client, _), anthropic.Anthropic(
            base_url=str(client.base_url).removesuffix("/v1/"), api_key="replay",
            max_retries=0) as claude:
        with pytest.raises(anthropic.InternalServerError) as unreachable:
            claude.messages.create(model=JUDGE, max_tokens=10, messages=[
                {"role": "user", "content": GRADE}])
    assert unreachable.value.status_code == 502
    assert "x-should-retry" not in unreachable.value.response.headers
    error = unreachable.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert "could not reach the upstream server" in error["error"]["message"]
