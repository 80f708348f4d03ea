"""`replay-server run` with scripts on Google's google-genai SDK: pointed at the replay by
the variables `run` sets alone (no script names a server), the recorded session of
tests/data/recorded/ replayed, and a changed prompt failing the run even when the script
swallows the SDK's error; a Gemini judge the saved run lacks, forwarded to `--upstream`,
saved, then replayed. Every variable of Google's that `run` sets, and the SDK's switch to
Vertex AI left as the user set it, reach the replay and nothing else: each run here has a
dead proxy for anything but 127.0.0.1, so that a request that would leave the machine
fails instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakemodel.server import create_app as fake_model
from tests.support import running

pytestmark = [pytest.mark.http, pytest.mark.slow]
ROOT = Path(__file__).parents[2]
SAVED = "tests/data/recorded/gemini.jsonl"
SCRIPT = ROOT / "tests" / "data" / "recorded" / "gemini_session.py"
REPLAYED = "every request was answered from the saved run"
# the first question the recorded session asked, and the same one changed
ASK = """
from google import genai
from google.genai import errors, types
from google.oauth2.credentials import Credentials
client = genai.Client({client})
try:
    print(client.models.generate_content(model="gemini-fake", contents={question!r},
                                         config=types.GenerateContentConfig(temperature=0)).text)
except errors.ClientError as e:
    print("swallowed", e.code, e.status)  # a harness that scores an error as a wrong answer
    {on_error}
"""
VERTEX = ('vertexai=True, project="p", location="us-central1", '
          'credentials=Credentials(token="ya29-not-a-token")')


def environment(**extra: str) -> dict[str, str]:
    """The caller's environment without Google's settings; every request that is not for
    127.0.0.1 goes to a proxy that is not there."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GOOGLE_", "GEMINI_", "VERTEX_"))
           and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    dead = "http://127.0.0.1:9"
    return {**env, "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "ALL_PROXY": dead,
            "NO_PROXY": "127.0.0.1,localhost", **extra}


def run(*command: str, options: tuple[str, ...] = ("--allow-unused",),
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "replay_server", "run", SAVED, *options,
                           "--log-level", "warning", "--", *command],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=environment(**(env or {})))


def ask(question: str, client: str = "", on_error: str = "raise") -> list[str]:
    return [sys.executable, "-c", ASK.format(client=client, question=question,
                                             on_error=on_error)]


def test_the_recorded_session_replays_under_run() -> None:
    result = run(sys.executable, str(SCRIPT), options=())
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "The answer is 16.", "The answer is 10.", "10", "The answer is 69.",
        "The answer is 7.", "The answer is 29.", "The answer is 6."]
    assert REPLAYED in result.stderr


@pytest.mark.parametrize("on_error", ["raise", "sys.exit(0)"])
def test_a_changed_prompt_fails_the_run_though_the_script_swallows_it(on_error: str) -> None:
    """The SDK retries nothing by default and raises ClientError; a script that catches it
    and exits 0 fails the run all the same."""
    result = run(*ask("What is 12 + 8?", on_error=f"import sys; {on_error}"))
    assert result.returncode == 3, result.stderr
    assert "1 distinct request(s) got no saved generation" in result.stderr
    assert "content 0 (user), character 13: the text differs" in result.stderr
    if on_error != "raise":
        assert "swallowed 400 INVALID_ARGUMENT" in result.stdout


@pytest.mark.parametrize(("client", "env"), [
    pytest.param(VERTEX, {}, id="vertexai=True (reads GOOGLE_VERTEX_BASE_URL)"),
    pytest.param("", {"GOOGLE_GENAI_USE_VERTEXAI": "true"},
                 id="GOOGLE_GENAI_USE_VERTEXAI (reads GOOGLE_GEMINI_BASE_URL)"),
    pytest.param("", {"GOOGLE_GENAI_USE_ENTERPRISE": "1"}, id="GOOGLE_GENAI_USE_ENTERPRISE"),
])
def test_a_vertex_ai_client_reaches_the_replay(client: str, env: dict[str, str]) -> None:
    """Vertex AI's paths are the same endpoint to the replay: `run` points the SDK's
    Vertex base URL at it too, and leaves the user's switch to Vertex AI alone (the SDK
    then sends what it sent when the run was recorded)."""
    result = run(*ask("What is 12 + 7?", client), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "The answer is 16.\n"
    assert REPLAYED in result.stderr


def test_vertex_ai_by_project_from_the_environment_is_a_loud_miss() -> None:
    """With the switch, GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION in the environment
    and a base URL from a variable, the SDK posts to the bare base URL, no path (before
    `record` too): no answer, and the run fails saying so."""
    result = run(*ask("What is 12 + 7?", on_error="import sys; sys.exit(0)"),
                 env={"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_CLOUD_PROJECT": "p",
                      "GOOGLE_CLOUD_LOCATION": "us-central1"})
    assert result.returncode == 3, result.stderr
    assert "HTTP 404 for POST /" in result.stderr


def test_a_gemini_judge_is_forwarded_saved_and_then_replayed(tmp_path: Path) -> None:
    """A model the saved run lacks goes to `--upstream` (in Google's path, with
    `--upstream-api-key`), plain and streamed, and is saved; the next pass replays it."""
    judge = str(tmp_path / "judge.jsonl")
    asked = ask("What is 2 + 2?").pop() + """
print("".join(c.text or "" for c in client.models.generate_content_stream(
    model="gemini-judge", contents="What is 3 + 3?")))"""
    asked = asked.replace('model="gemini-fake"', 'model="gemini-judge"')
    with running(fake_model(["gemini-judge"])) as upstream:
        first = run(sys.executable, "-c", asked, options=(
            "--allow-unused", "--upstream", upstream.removesuffix("/v1"),
            "--upstream-api-key", "judge-key", "--out", judge))
    assert first.returncode == 0, first.stderr
    assert "2 exchanges answered and saved" in first.stderr
    assert "judge-key" not in Path(judge).read_text()
    again = subprocess.run([sys.executable, "-m", "replay_server", "run", SAVED, judge,
                            "--allow-unused", "--", sys.executable, "-c", asked],
                           capture_output=True, text=True, cwd=ROOT, timeout=120,
                           env=environment())
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout and REPLAYED in again.stderr
