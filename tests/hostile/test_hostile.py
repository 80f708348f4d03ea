"""Hostile and malformed requests: fuzzing from the OpenAPI schema, a barrage of garbage,
the API key; the server answers every one in the envelope and keeps serving."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.generation import GenerationMode

from replay_server.settings import Settings
from replay_server.web.app import create_app
from tests.support import (
    MODEL,
    Counting,
    assert_error,
    build,
    chat_record,
    chat_response,
    completion_record,
    completion_response,
    running,
    spawn,
    user,
    write_jsonl,
)

pytestmark = pytest.mark.http
RECORDS = [chat_record("q", chat_response("a")),
           completion_record("p", completion_response(" b"), line=2)]
APP = create_app(Settings(max_body_size=1 << 20), build(RECORDS))
SCHEMA = schemathesis.openapi.from_dict(APP.openapi())
SCHEMA.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with running(APP) as url:
        yield url.removesuffix("/v1")


def documented_envelopes(path: str, method: str, status: int) -> set[str]:
    """The error envelopes the schema documents for a route's status (its first error's
    where the status is not listed; a served method's for a method that is not; OpenAI's
    where the route documents none). Google's model routes (`GET /{version}/models...`)
    take requests of no API's too (another version, `/v1/models/...` from an OpenAI
    client): those are answered in OpenAI's envelope, the default
    (tests/web/test_gemini_api.py holds Google's requests to Google's)."""
    operations = APP.openapi()["paths"][path]
    operation = operations.get(method.lower()) or next(iter(operations.values()))
    responses = operation.get("responses", {})
    errors = [r for code, r in sorted(responses.items()) if code.startswith("4")]
    documented: dict[str, Any] = responses.get(str(status)) or next(iter(errors), {})
    ref = documented.get("content", {}).get("application/json", {}).get("schema", {})
    envelope = str(ref.get("$ref", "/Error")).rsplit("/", 1)[1]
    shared = envelope == "GoogleError" and "get" in operations
    return {envelope, "Error"} if shared else {envelope}


ENVELOPES = {"Error": {"message", "type", "param", "code"},
             "AnthropicError": {"type", "message"}, "GoogleError": {"code", "message", "status"}}


def assert_envelope(response: Any, envelopes: set[str] | None = None) -> str:
    """An error in one of the envelopes named (OpenAI's unless said), never retried;
    which one."""
    assert response.status_code < 500, response.text
    if response.status_code < 400:
        return ""
    retry = response.headers["x-should-retry"]
    assert (retry[0] if isinstance(retry, list) else retry) == "false"
    error = response.json()["error"]
    matched = [e for e in envelopes or {"Error"} if set(error) == ENVELOPES[e]]
    assert len(matched) == 1 and error["message"], (envelopes, error)
    return matched[0]


@pytest.mark.slow
@SCHEMA.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzzing_from_the_openapi_schema_gives_no_5xx(case: Any, base: str) -> None:
    """Every error in the envelope the schema documents for its route."""
    response = case.call(base_url=base)
    envelope = assert_envelope(response, documented_envelopes(
        case.path, case.method, response.status_code))
    if response.status_code == 400 and isinstance(case.body, dict) and envelope == "Error" \
            and "request body" not in response.json()["error"]["message"]:
        assert response.json()["error"]["param"], "a rejected field is named"


def valid_chat(url: str) -> None:
    r = httpx.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": user("q")})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "a"


def garbage() -> Iterator[tuple[str, str, dict[str, str], bytes]]:
    """(method, path, headers, body) of requests no server should choke on."""
    json_ct = {"content-type": "application/json"}
    deep = b"[" * 5000 + b"]" * 5000
    yield "POST", "/v1/chat/completions", json_ct, b"{"
    yield "POST", "/v1/chat/completions", json_ct, b"\xff\xfe\x00garbage"
    yield "POST", "/v1/chat/completions", json_ct, b'{"messages": "' + b"x" * 500_000 + b'"}'
    yield "POST", "/v1/chat/completions", json_ct, b'{"messages": ' + deep + b"}"
    yield "POST", "/v1/chat/completions", json_ct, b'{"messages": [{"role": 1}]}'
    yield "POST", "/v1/chat/completions", json_ct, b'{"messages": [], "n": -1}'
    yield "POST", "/v1/chat/completions", json_ct, b'{"messages": [{"role": "user"}], "n": 1e99}'
    yield "POST", "/v1/chat/completions", json_ct, b'{"model": {"$ne": 1}, "messages": null}'
    yield "POST", "/v1/completions", json_ct, b'{"prompt": [[1, 2], "a"]}'
    yield "POST", "/v1/completions", json_ct, b'{"prompt": [99999999999999999999999]}'
    yield "POST", "/v1/completions", json_ct, b"null"
    yield "POST", "/v1/completions", {"content-type": "text/plain"}, b"prompt=hello"
    yield "POST", "/v1/completions", {"content-type": "multipart/form-data; boundary=x"}, b"--x"
    yield "POST", "/v1/completions", {}, b""
    yield "POST", "/v1/completions", json_ct, b" " * 1000
    yield "POST", "/v1/chat/completions", json_ct, b"x" * (2 << 20)
    yield "GET", "/v1/chat/completions", {}, b""
    yield "DELETE", "/v1/models", {}, b""
    yield "PUT", "/replay/status", json_ct, b"{}"
    yield "GET", "/../../etc/passwd", {}, b""
    yield "GET", "/v1/" + "a" * 5000, {}, b""
    yield "POST", "/v1/chat/completions?x=" + "y" * 2000, json_ct, b"[]"


def rss(pid: int) -> int:
    return int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
               .group(1)) * 1024  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_barrage_of_garbage_leaves_the_server_answering_correctly(base: str) -> None:
    bad = list(garbage())
    with httpx.Client(timeout=30) as client:
        for round_ in range(150):
            for method, path, headers, body in bad:
                r = client.request(method, base + path, headers=headers, content=body)
                assert_envelope(r)
            if round_ % 10 == 0:
                valid_chat(base)
    valid_chat(base)


@pytest.mark.slow
def test_memory_stays_flat_under_a_barrage(tmp_path: Path) -> None:
    """In its own process, so that its resident memory can be read: after a warm-up
    barrage, thousands more garbage requests do not grow it."""
    saved = write_jsonl(tmp_path / "run.jsonl", RECORDS)
    bad = list(garbage())
    with spawn("serve", str(saved), "--log-level", "error") as server, \
            httpx.Client(timeout=30) as client:
        def barrage(rounds: int) -> None:
            for _ in range(rounds):
                for method, path, headers, body in bad:
                    assert_envelope(client.request(method, server.base + path,
                                                   headers=headers, content=body))
        barrage(60)
        before = rss(server.proc.pid)
        barrage(120)
        after = rss(server.proc.pid)
        valid_chat(server.base)
    assert after - before < 8 << 20, f"RSS grew {after - before} bytes"


def test_a_client_that_goes_silent_or_vanishes_does_not_hurt_others(base: str) -> None:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as half:
        half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 1000\r\n\r\n{")
        with socket.create_connection((host, int(port))) as gone:
            gone.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 50\r\n\r\n")
        valid_chat(base)
    valid_chat(base)


# API key

@pytest.fixture(scope="module")
def keyed_app() -> Counting:
    return Counting(create_app(Settings(api_key="s3cret-key"), build(RECORDS)))


@pytest.fixture(scope="module")
def keyed(keyed_app: Counting) -> Iterator[str]:
    with running(keyed_app) as url:
        yield url


def test_an_api_key_guards_every_route_but_health(keyed: str) -> None:
    base = keyed.removesuffix("/v1")
    for method, path in [("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
                         ("GET", "/v1/models"), ("GET", "/replay/status"),
                         ("GET", "/replay/misses"), ("POST", "/replay/reset"),
                         ("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/nope")]:
        for headers in ({}, {"authorization": "Bearer guess-777"},
                        {"authorization": "s3cret-key"}):
            r = httpx.request(method, base + path, headers=headers,
                              json={"model": MODEL, "messages": user("q")})
            assert_error(r, 401, 401)
            assert "s3cret-key" not in r.text and "guess-777" not in r.text
    assert httpx.get(base + "/health").status_code == 200


def test_the_right_key_is_let_in_and_a_wrong_one_is_not_retried(keyed: str,
                                                                 keyed_app: Counting) -> None:
    with openai.OpenAI(base_url=keyed, api_key="s3cret-key") as good:
        assert good.chat.completions.create(model=MODEL, messages=user("q")
                                            ).choices[0].message.content == "a"
    before = len(keyed_app.seen)
    with openai.OpenAI(base_url=keyed, api_key="nope", max_retries=5) as wrong, \
            pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model=MODEL, messages=user("q"))
    assert len(keyed_app.seen) == before + 1
    status = httpx.get(keyed.removesuffix("/v1") + "/replay/status",
                       headers={"authorization": "Bearer s3cret-key"}).json()
    assert status["models"][MODEL]["hits"] >= 1


def test_the_key_never_reaches_the_logs(tmp_path: Path) -> None:
    saved = write_jsonl(tmp_path / "run.jsonl", RECORDS[:1])
    with spawn("serve", str(saved), "--access-log", "--log-level", "debug",
               env={"REPLAY_SERVER_API_KEY": "k-9f8e7d"}) as server, httpx.Client() as client:
        client.post(server.url + "/chat/completions",
                    headers={"authorization": "Bearer k-9f8e7d"},
                    json={"model": MODEL, "messages": user("nope")})
        client.post(server.url + "/chat/completions",
                    headers={"authorization": "Bearer guess-123"},
                    json={"model": MODEL, "messages": user("q")})
        server.stop()
    log = server.output  # uvicorn's access log (stdout) too
    assert "replay_no_match" in log and "401" in log
    assert "k-9f8e7d" not in log and "guess-123" not in log


def listening(port: int) -> set[str]:
    """The local addresses that sockets listen on at `port` (IPv4 as dotted quads, IPv6 as
    /proc spells it)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]) if table == "tcp"
                          else address)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("host", [None, "127.0.0.2"])
def test_binds_to_loopback_unless_told_otherwise(tmp_path: Path, host: str | None) -> None:
    saved = write_jsonl(tmp_path / "run.jsonl", RECORDS[:1])
    with spawn("serve", str(saved), *(["--host", host] if host else [])) as server:
        port = int(server.base.rsplit(":", 1)[1])
        assert listening(port) == {host or "127.0.0.1"}
        assert server.url == f"http://{host or '127.0.0.1'}:{port}/v1"
