"""`replay-server record`'s start-up: where to point each API's clients, for the APIs the
upstream serves, where the key goes and how to stop it; no credential of the upstream URL
printed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from replay_server.commands.record import hints
from replay_server.saved.writer import RecordWriter
from replay_server.web.recorder import Recorder
from tests.fakemodel.server import create_app as fake_model
from tests.support import free_port, running, spawn

pytestmark = pytest.mark.http
URL = "http://127.0.0.1:8001/v1"
OPENAI = f"  export OPENAI_BASE_URL={URL}"
ANTHROPIC = f"  export ANTHROPIC_BASE_URL={URL.removesuffix('/v1')}"
GOOGLE = f"  export GOOGLE_GEMINI_BASE_URL={URL.removesuffix('/v1')}"


def only(path: str, method: str = "POST") -> Starlette:
    """A server of one API: a 400 for any request to its one route, 404 elsewhere."""

    async def refuse(request: Request) -> JSONResponse:
        return JSONResponse({"error": "bad request"}, status_code=400)

    return Starlette(routes=[Route(path, refuse, methods=[method])])


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[list[Recorder]]:
    """Recorders made in the test, their writers closed at its end."""
    made: list[Recorder] = []
    yield made
    for recorder in made:
        recorder.writer.close()


@pytest.mark.parametrize("upstream, expected", [
    (lambda: fake_model(["m"]), [OPENAI, ANTHROPIC, GOOGLE]),
    (lambda: only("/v1/chat/completions"), [OPENAI]),
    (lambda: only("/v1/messages"), [ANTHROPIC]),
    (lambda: only("/v1beta/models", "GET"), [GOOGLE]),
], ids=["all", "openai", "anthropic", "google"])
def test_the_variables_are_those_of_the_apis_the_upstream_serves(
        upstream: object, expected: list[str], recording: list[Recorder],
        tmp_path: Path) -> None:
    assert callable(upstream)
    with running(upstream()) as url:
        recording.append(Recorder(url, RecordWriter(tmp_path / "run.jsonl")))
        lines = hints(recording[0], URL)
    assert [line for line in lines if "export" in line] == expected
    assert any("API key" in line and "never saved" in line for line in lines)
    assert any("Ctrl-C" in line and "SIGTERM" in line for line in lines)


def test_an_upstream_that_cannot_be_reached_gets_every_api_s_variables(
        recording: list[Recorder], tmp_path: Path) -> None:
    recording.append(Recorder(f"http://127.0.0.1:{free_port()}",
                              RecordWriter(tmp_path / "run.jsonl")))
    assert [line for line in hints(recording[0], URL) if "export" in line] == \
        [OPENAI, ANTHROPIC, GOOGLE]


def test_an_upstream_that_serves_no_api_gets_every_variable_and_a_warning(
        recording: list[Recorder], tmp_path: Path) -> None:
    """404 on every API's endpoint (`--upstream` names a wrong path: `/api`, a proxy's
    prefix): which API the client speaks cannot be told, and the URL is likely wrong; never
    a hint without a variable to set."""
    with running(only("/elsewhere")) as url:
        recording.append(Recorder(url, RecordWriter(tmp_path / "run.jsonl")))
        lines = hints(recording[0], URL)
    assert [line for line in lines if "export" in line] == [OPENAI, ANTHROPIC, GOOGLE]
    assert "()" not in "".join(lines)
    (warning,) = [line for line in lines if "warning" in line]
    assert "404" in warning and "POST /v1/chat/completions" in warning and \
        "POST /v1/messages" in warning and "GET /v1beta/models" in warning and \
        "--upstream" in warning


@pytest.mark.slow
def test_record_says_where_to_point_each_client_and_no_credential(tmp_path: Path) -> None:
    with running(only("/v1/messages")) as upstream:
        host = upstream.removeprefix("http://").removesuffix("/v1")
        with spawn("record", "--upstream", f"http://user:pw-secret@{host}?key=q-secret",
                   "--out", str(tmp_path / "run.jsonl")) as recorder:
            recorder.stop()
    assert f"forwarding to http://{host}, saving to" in recorder.output
    assert f"export ANTHROPIC_BASE_URL={recorder.base}\n" in recorder.output
    assert "OPENAI_BASE_URL" not in recorder.output
    assert "secret" not in recorder.output
