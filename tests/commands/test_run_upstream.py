"""`replay-server run|serve --upstream URL --out FILE`: the judge forwarded and saved,
counted apart from the replay, and failing the run when it fails upstream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from replay_server.commands.serve import open_run, upstream_of
from replay_server.settings import Settings
from tests.fakemodel.server import create_app as fake_model
from tests.support import Counting, running, spawn

pytestmark = pytest.mark.http
ROOT = Path(__file__).parents[2]
SAVED = ROOT / "examples"
JUDGE = "judge-model"
# the candidate's saved prompt, then the judge's new one; errors swallowed, as harnesses do
ASK = """
import sys, openai
client = openai.OpenAI(max_retries=0)
def chat(model, text):
    try:
        r = client.chat.completions.create(model=model, temperature=0,
                                           messages=[{"role": "user", "content": text}])
        return r.choices[0].message.content
    except openai.APIError as e:
        return "error " + str(getattr(e, "status_code", "connection"))
print(repr(chat("demo/tiny-chat-model", "Write a haiku about rescoring.")))
GRADE = "[Submission]: The answer is 7. *** [Criterion]: 7 *** GRADE: $LETTER"
print(repr(chat(sys.argv[1], GRADE)))
"""


def run(*args: str, judge: str = JUDGE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "replay_server", "run", str(SAVED), *args,
                           "--allow-unused", "--log-level", "warning", "--", sys.executable,
                           "-c", ASK, judge], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.fixture
def judge(tmp_path: Path) -> Iterator[str]:
    with running(fake_model([JUDGE], str(tmp_path / "wire.jsonl"))) as url:
        yield url


@pytest.mark.slow
def test_a_judge_is_forwarded_saved_reported_and_replayed_the_next_time(
        judge: str, tmp_path: Path) -> None:
    out, report = tmp_path / "judge.jsonl", tmp_path / "report.jsonl"
    live = run("--upstream", judge, "--out", str(out), "--report", str(report))
    assert live.returncode == 0, live.stderr
    answers = live.stdout.splitlines()
    assert answers[1].endswith("GRADE: C'")
    assert "1 answered from the saved run, 0 got no saved generation, 1 forwarded " \
        "upstream" in live.stderr
    assert f"model {JUDGE} (forwarded upstream, not replayed): 1 exchanges answered and " \
        "saved; failed attempts: none" in live.stderr
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert sorted(line["status"] for line in lines) == ["forwarded", "hit"]
    (forwarded,) = [line for line in lines if line["status"] == "forwarded"]
    assert forwarded["model"] == JUDGE and forwarded["outcomes"] == {"saved": 1}
    replayed = run(str(out), "--report", str(report))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.splitlines() == answers
    assert "forwarded upstream" not in replayed.stderr
    changed = run(str(out), judge="judge-model-2")
    assert changed.returncode == 3 and changed.stdout.splitlines()[1] == "'error 404'"


@pytest.mark.slow
def test_an_unreachable_upstream_fails_the_run_with_its_own_status(tmp_path: Path) -> None:
    result = run("--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "judge.jsonl"))
    assert result.returncode == 6, result.stderr
    assert result.stdout.splitlines()[1] == "'error 502'"
    assert "warning: cannot reach the upstream http://127.0.0.1:9" in result.stderr
    assert f"- [upstream_error] /v1/chat/completions model={JUDGE}: unreachable: " \
        "ConnectError" in result.stderr
    assert "1 distinct request(s) forwarded upstream got no answer to save" in result.stderr


@pytest.mark.slow
def test_a_saved_models_miss_under_an_upstream_is_a_replay_miss(
        judge: str, tmp_path: Path) -> None:
    result = run("--upstream", judge, "--out", str(tmp_path / "judge.jsonl"),
                 judge="demo/tiny-chat-model")
    assert result.returncode == 3, result.stderr
    assert result.stdout.splitlines()[1] == "'error 400'"
    assert not (tmp_path / "wire.jsonl").exists()  # the judge was never asked


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--upstream", "http://127.0.0.1:9"], "--upstream and --out go together"),
    (["--upstream", "http://127.0.0.1:9", "--out", "examples/demo-run.jsonl"],
     "is one of the inputs"),
])
def test_an_upstream_that_cannot_be_saved_is_a_bad_option(args: list[str],
                                                          message: str) -> None:
    result = run(*args)
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.slow
def test_serve_forwards_a_judge_and_says_what_it_saved(judge: str, tmp_path: Path) -> None:
    out = tmp_path / "judge.jsonl"
    with spawn("serve", str(SAVED), "--upstream", judge, "--out", str(out)) as server:
        with openai.OpenAI(base_url=server.url, api_key="replay", max_retries=0) as client:
            reply = client.chat.completions.create(model=JUDGE, messages=[
                {"role": "user", "content": "What is 1 + 1?"}])
        assert server.stop() == 0
    assert reply.choices[0].message.content is not None
    assert f"go to {judge.removesuffix('/v1')}, saved to {out}" in server.output
    assert f"upstream: recorded 1 exchanges (1 records) to {out}" in server.output
    assert json.loads(out.read_text())["model"] == JUDGE


# An Anthropic harness under `run --api-key`: the anthropic SDK from the environment `run`
# gives it, sending the key as anthropic SDKs before 2.x did (`X-Api-Key`) too.
ASK_CLAUDE = """
import os, anthropic
client = anthropic.Anthropic(max_retries=0, default_headers={
    "X-Api-Key": os.environ["ANTHROPIC_API_KEY"]})
reply = client.messages.create(model="judge-model", max_tokens=100, messages=[
    {"role": "user", "content": "What is 2 + 2?"}])
print(reply.content[0].text)
"""


@pytest.mark.slow
def test_an_anthropic_judge_under_run_gets_the_upstream_key_alone(tmp_path: Path) -> None:
    upstream = Counting(fake_model([JUDGE]))
    out = tmp_path / "judge.jsonl"
    env = {**os.environ, "REPLAY_SERVER_UPSTREAM_API_KEY": "sk-ant-judge"}
    with running(upstream) as url:
        result = subprocess.run(
            [sys.executable, "-m", "replay_server", "run", str(SAVED), "--api-key", "own-key",
             "--upstream", url, "--out", str(out), "--allow-unused", "--log-level", "warning",
             "--", sys.executable, "-c", ASK_CLAUDE], capture_output=True, text=True,
            cwd=ROOT, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("The answer is")
    # (the other request is the probe at start, `GET /v1/models`)
    (headers, query), = [h for p, h in zip(upstream.seen, upstream.heard, strict=True)
                         if p == "/v1/messages"]
    keys = [(k, v) for k, v in headers if k in ("authorization", "x-api-key")]
    assert keys == [("x-api-key", "sk-ant-judge")]
    assert not any("own-key" in v for _, v in headers) and query == ""
    assert "own-key" not in out.read_text() and "sk-ant-judge" not in out.read_text()


def test_the_upstream_is_said_without_the_credentials_in_its_url(tmp_path: Path) -> None:
    settings = Settings(upstream="http://user:pw-secret@127.0.0.1:9/v1?key=q-secret",
                        out=str(tmp_path / "judge.jsonl"))
    said: list[str] = []
    with upstream_of(open_run([SAVED], settings), settings, said.append) as recorder:
        assert recorder is not None
    assert "go to http://127.0.0.1:9, saved to" in said[0]
    assert "cannot reach the upstream http://127.0.0.1:9 (" in said[1]
    assert not any("secret" in line for line in said), said


# a harness's judge call: its client's retries and timeout, its failure swallowed and scored
JUDGED = """
import sys, openai
client = openai.OpenAI(max_retries=int(sys.argv[1]), timeout=float(sys.argv[2]))
try:
    r = client.chat.completions.create(model="judge-model", temperature=0, messages=[
        {"role": "user", "content": "[Submission]: 7 *** [Criterion]: 7 *** GRADE: $LETTER "
                                    + sys.argv[3]}])
    print(repr(r.choices[0].message.content))
except openai.APIError as e:
    print("error", type(e).__name__)
"""


def judged(judge: str, out: Path, retries: int, timeout: float, fault: str
           ) -> subprocess.CompletedProcess[str]:
    """`run --upstream JUDGE` of a harness whose one judge call meets `fault`."""
    return subprocess.run([sys.executable, "-m", "replay_server", "run", str(SAVED),
                           "--upstream", judge, "--out", str(out), "--allow-unused",
                           "--log-level", "warning", "--", sys.executable, "-c", JUDGED,
                           str(retries), str(timeout), fault],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.slow
def test_a_judge_call_its_client_gave_up_on_fails_the_run(judge: str, tmp_path: Path) -> None:
    result = judged(judge, tmp_path / "judge.jsonl", 0, 1.0, "[fault: hang]")
    assert result.stdout.strip() == "error APITimeoutError"  # the harness scored it failed
    assert result.returncode == 6, result.stderr
    assert "1 exchanges answered and saved" not in result.stderr
    assert f"- [abandoned] /v1/chat/completions model={JUDGE}: the client left before the " \
        "answer was complete" in result.stderr
    assert "1 distinct request(s) forwarded upstream got no answer to save" in result.stderr


@pytest.mark.slow
def test_a_judge_call_abandoned_then_retried_and_saved_passes(
        judge: str, tmp_path: Path) -> None:
    result = judged(judge, tmp_path / "judge.jsonl", 1, 1.0, "[fault: hang once]")
    assert result.stdout.strip().endswith("GRADE: C'")
    assert result.returncode == 0, result.stderr
    assert "1 exchanges answered and saved; failed attempts: abandoned=1" in result.stderr
    assert "1 distinct forwarded request(s) failed upstream, then a later attempt was " \
        "answered and saved (1 failed attempt(s)): not a failure" in result.stderr


@pytest.mark.slow
def test_a_judge_429_that_the_client_s_retry_recovered_passes(
        judge: str, tmp_path: Path) -> None:
    out = tmp_path / "judge.jsonl"
    result = judged(judge, out, 2, 30.0, "[fault: 429 once]")
    assert result.stdout.strip().endswith("GRADE: C'")
    assert result.returncode == 0, result.stderr
    assert "1 exchanges answered and saved; failed attempts: upstream_error=1" in result.stderr
    assert "1 distinct forwarded request(s) failed upstream, then a later attempt was " \
        "answered and saved (1 failed attempt(s)): not a failure" in result.stderr
    assert len(out.read_text().splitlines()) == 1


@pytest.mark.slow
def test_a_judge_429_that_every_retry_met_fails_the_run(judge: str, tmp_path: Path) -> None:
    result = judged(judge, tmp_path / "judge.jsonl", 2, 30.0, "[fault: 429]")
    assert result.stdout.strip() == "error RateLimitError"
    assert result.returncode == 6, result.stderr
    assert f"- [upstream_error] /v1/chat/completions model={JUDGE} (3 attempts): HTTP 429" \
        in result.stderr


@pytest.mark.slow
def test_a_judge_call_cut_off_by_a_signal_to_run_is_no_upstream_failure(
        judge: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "replay_server", "run", str(SAVED), "--upstream", judge,
            "--out", str(tmp_path / "judge.jsonl"), "--allow-unused", "--log-level", "warning",
            "--", sys.executable, "-c", JUDGED, "0", "60", "[fault: hang]"]
    with subprocess.Popen(argv, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, start_new_session=True) as process:
        try:
            wire, deadline = tmp_path / "wire.jsonl", time.monotonic() + 60
            while not (wire.exists() and '"fault": "hang"' in wire.read_text()):
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, err
    assert "failed attempts: none; cut off when run stopped COMMAND: 1" in err


# a harness that resends a failed judge call at once, whatever the error (evalplus's way)
RESENT = """
import sys, openai
client = openai.OpenAI(max_retries=0)
for _ in range(int(sys.argv[1])):
    try:
        client.chat.completions.create(model="judge-model", messages=[
            {"role": "user", "content": "GRADE: $LETTER " + sys.argv[2]}])
        break
    except openai.APIError:
        pass
print("not stopped")
"""


@pytest.mark.slow
def test_a_judge_call_refused_again_and_again_stops_the_command_at_the_bound(
        judge: str, tmp_path: Path) -> None:
    """A harness that resends a judge call the upstream keeps refusing would never end,
    and would spend the judge's quota: stopped at --max-attempts as a replay refusal is,
    and not by --stop-on-miss at the first (a retry may recover it)."""
    result = subprocess.run(
        [sys.executable, "-m", "replay_server", "run", str(SAVED), "--upstream", judge,
         "--out", str(tmp_path / "judge.jsonl"), "--allow-unused", "--max-attempts", "5",
         "--stop-on-miss", "--log-level", "warning", "--", sys.executable, "-c", RESENT,
         "60", "[fault: 429]"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 6, result.stderr
    assert "not stopped" not in result.stdout
    assert "replay-server run: stopped COMMAND when one request had been refused 5 times " \
        "(--max-attempts 5; 0 never stops): [upstream_error] /v1/chat/completions " \
        f"model={JUDGE}: HTTP 429" in result.stderr
