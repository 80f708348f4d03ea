"""`replay-server run`: a harness under the replay server, failed on any miss."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import docs_page

pytestmark = pytest.mark.http
ROOT = Path(__file__).parents[2]
CLI = [sys.executable, "-m", "replay_server", "run", "examples/", "--log-level", "warning"]
MODEL = "demo/tiny-chat-model"
ASK = f"""
import os, openai
client = openai.OpenAI()
assert os.environ["OPENAI_API_BASE"] == os.environ["OPENAI_BASE_URL"]
def chat(text, **kw):
    try:
        r = client.chat.completions.create(model="{MODEL}",
                                           messages=[{{"role": "user", "content": text}}], **kw)
        return [c.message.content for c in r.choices]
    except openai.APIStatusError as e:   # a harness that swallows errors
        return "error " + str(e.status_code)
"""
ALL = ASK + """
print(chat("Name a primary color in one word.", n=2))
print(chat("Write a haiku about rescoring."))
client.chat.completions.create(model="demo/tiny-chat-model", messages=[
    {"role": "system", "content": "Answer with a number only."},
    {"role": "user", "content": "What is 2+2?"}])
for prompt in ["The capital of France is", "Question: What is 12 + 7?\\nAnswer:"]:
    client.completions.create(model="demo/tiny-chat-model", prompt=prompt)
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.slow
def test_a_command_that_gets_every_answer_passes() -> None:
    result = run("--", sys.executable, "-c", ALL)
    assert result.returncode == 0, result.stderr
    assert "['Red.', 'Blue.']" in result.stdout
    assert "5 prompts answered; errors: none; saved samples never asked for: 0" in result.stderr
    assert "every request was answered from the saved run" in result.stderr


TOKENIZE = f"""
import httpx
base = os.environ["OPENAI_BASE_URL"].removesuffix("/v1")
print(httpx.post(base + "/tokenize", json={{"model": "{MODEL}", "prompt": "Hi"}}).status_code)
"""


@pytest.mark.slow
def test_an_unanswered_tokenizer_call_is_reported_loudly_but_passes() -> None:
    result = run("--", sys.executable, "-c", ALL + TOKENIZE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "404"
    assert "tokenizer calls: 0 answered from recordings, 0 computed with --tokenizer, 1 " \
        "unanswered" in result.stderr
    assert "WARNING: 1 tokenizer call(s) went unanswered: token counts the harness derives " \
        "from them may differ; no saved generation was affected (--strict would fail the " \
        "run)" in result.stderr
    assert "1 tokenizer call(s) went unanswered (no generation was affected" in result.stderr


@pytest.mark.slow
def test_an_unanswered_tokenizer_call_fails_the_run_with_strict() -> None:
    # (only the tokenizer call: --strict would also compare the sampling parameters)
    result = run("--strict", "--", sys.executable, "-c", ASK + TOKENIZE)
    assert result.returncode == 3, result.stderr
    assert "1 tokenizer call(s) went unanswered, and --strict fails the run on them" \
        in result.stderr


@pytest.mark.slow
def test_stop_on_miss_stops_at_an_unanswered_tokenizer_call_only_with_strict() -> None:
    loose = run("--stop-on-miss", "--", sys.executable, "-c", ALL + TOKENIZE)
    assert loose.returncode == 0 and "stopped COMMAND" not in loose.stderr
    strict = run("--strict", "--stop-on-miss", "--", sys.executable, "-c",
                 ASK + TOKENIZE + "import time; time.sleep(60); print('not stopped')")
    assert strict.returncode == 3, strict.stderr
    assert "stopped COMMAND at the first miss" in strict.stderr
    assert "not stopped" not in strict.stdout


@pytest.mark.slow
def test_a_swallowed_miss_fails_the_run_with_the_reason() -> None:
    result = run("--", sys.executable, "-c", ASK + "print(chat('Name a colour'))")
    assert result.stdout.strip() == "error 400"
    assert result.returncode == 3
    assert "replay_no_match=1" in result.stderr
    assert "first difference: message 0 (user), character 7" in result.stderr
    assert "1 distinct request(s) got no saved generation (1 attempt(s)): failing" \
        in result.stderr


def test_a_command_that_fails_on_its_own_keeps_its_exit_status() -> None:
    result = run("--", sys.executable, "-c", "raise SystemExit(7)")
    assert result.returncode == 7
    assert "COMMAND failed with exit status 7" in result.stderr


@pytest.mark.slow
def test_saved_generations_never_asked_for_fail_unless_allowed() -> None:
    ask_one = ASK + "print(chat('Write a haiku about rescoring.'))"
    result = run("--", sys.executable, "-c", ask_one)
    assert result.returncode == 4
    assert "saved samples never asked for: 5" in result.stderr
    assert "examples/demo-run.jsonl:1" in result.stderr
    allowed = run("--allow-unused", "--", sys.executable, "-c", ask_one)
    assert allowed.returncode == 0, allowed.stderr
    assert "5 saved sample(s) never asked for, allowed" in allowed.stderr


@pytest.mark.slow
def test_stop_on_miss_stops_the_command_at_the_first_miss() -> None:
    script = ASK + "chat('Name a colour')\nimport time\ntime.sleep(60)\nprint('not stopped')"
    result = run("--stop-on-miss", "--", sys.executable, "-c", script)
    assert result.returncode == 3
    assert "not stopped" not in result.stdout
    assert "stopped COMMAND at the first miss" in result.stderr


def test_a_missing_command_is_a_usage_error() -> None:
    result = run()
    assert result.returncode == 2 and "after `--`" in result.stderr


@pytest.mark.slow
def test_report_has_a_line_per_distinct_request_and_groups_misses(tmp_path: Path) -> None:
    report = tmp_path / "report.jsonl"
    script = ASK + """
for _ in range(2):
    print(chat("Write a haiku about rescoring."))
for text in ["Name a primary color in one word. ", "Write a haiku about rescoring. "]:
    print(chat(text))
print(chat("Something never saved"))
"""
    result = run("--allow-unused", "--report", str(report), "--", sys.executable, "-c", script)
    assert result.returncode == 3
    lines = {line["prompt"]: line for line in map(json.loads, report.read_text().splitlines())}
    assert len(lines) == 4
    hit = next(line for line in lines.values() if line["status"] == "hit")
    assert hit["attempts"] == 2 and hit["served"] == ["examples/demo-run.jsonl:3 (demo-3)"] * 2
    misses = [line for line in lines.values() if line["status"] == "miss"]
    groups = sorted(m["first_difference"]["group"] for m in misses)
    assert groups == ["the last message (user): the text differs"] + [
        "the last message (user): whitespace differs at the end"] * 2
    assert all(m["code"] == "replay_no_match" and m["nearest"] for m in misses)
    assert "    2: the last message (user): whitespace differs at the end" in result.stderr
    assert f"wrote 4 request(s) to {report}" in result.stderr


@pytest.mark.slow
def test_a_miss_outranks_the_command_s_own_failure() -> None:
    """Harnesses that exit non-zero on failed items would otherwise hide the miss."""
    script = ASK + "print(chat('Name a colour'))\nraise SystemExit(100)"
    result = run("--", sys.executable, "-c", script)
    assert result.returncode == 3, result.stderr
    assert "COMMAND failed with exit status 100" in result.stderr
    assert "1 distinct request(s) got no saved generation (1 attempt(s)): failing" \
        in result.stderr


@pytest.mark.slow
def test_the_command_s_own_failure_outranks_no_requests_and_unused_samples() -> None:
    result = run("--", sys.executable, "-c", ASK + "raise SystemExit(9)")
    assert result.returncode == 9
    unused = run("--", sys.executable, "-c",
                 ASK + "chat('Write a haiku about rescoring.')\nraise SystemExit(9)")
    assert unused.returncode == 9


RESET = """
import urllib.request
urllib.request.urlopen(urllib.request.Request(
    os.environ["OPENAI_BASE_URL"].removesuffix("/v1") + "/replay/reset", method="POST"))
"""


@pytest.mark.slow
def test_a_reset_between_passes_forgets_the_cursors_not_the_misses() -> None:
    """A harness that misses, resets (as before a second pass), then hits everything."""
    second_pass = ALL.replace("print(chat(", "print('second pass', chat(")
    script = ASK + "print(chat('Name a colour'))\n" + ALL + RESET + second_pass
    result = run("--", sys.executable, "-c", script)
    assert result.returncode == 3, result.stderr
    # the cursors started over: the second pass got the same samples, not replay_exhausted
    assert "second pass ['Red.', 'Blue.']" in result.stdout
    assert "requests: 12 (10 answered from the saved run, 1 got no saved generation, " \
        "1 reset(s))" in result.stderr
    assert "10 prompts answered; errors: replay_no_match=1" in result.stderr
    assert "every request was answered" not in result.stderr


HALF_SENT = """
import socket
half = socket.create_connection(("127.0.0.1", client.base_url.port))
half.sendall(b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\n"
             b"Content-Type: application/json\\r\\nContent-Length: 1000\\r\\n\\r\\n{")
"""


@pytest.mark.slow
def test_a_request_cut_off_in_flight_fails_the_run() -> None:
    """A client that sends half a body and gives up (the harness scores the item as
    failed): the request reached the server and got no answer."""
    result = run("--", sys.executable, "-c", ALL + HALF_SENT + "half.close()")
    assert result.returncode == 3, result.stderr
    assert "5 prompts answered; errors: none; saved samples never asked for: 0" in result.stderr
    assert "1 more request(s) reached the server and got no answer: 1 cut off in flight " \
        "(begun, never received whole: its client left or stopped sending)" in result.stderr
    assert "replay-server run: 1 request(s) reached the server and got no answer: failing" \
        in result.stderr


@pytest.mark.slow
def test_a_probe_of_the_base_url_is_no_miss() -> None:
    """garak checks that its server is up with `GET /v1/` (its default URL ends in a
    slash): answered as vLLM answers it, 404, and a faithful rescoring still passes."""
    probe = ASK + """
import httpx
print(httpx.get(os.environ["OPENAI_BASE_URL"] + "/").status_code,
      httpx.get(os.environ["OPENAI_BASE_URL"]).status_code)
""" + ALL.removeprefix(ASK)
    result = run("--", sys.executable, "-c", probe)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "404 404"
    misspelled = ASK + """
try:
    client.post("/chat/completion", body={}, cast_to=object)
except openai.NotFoundError:
    print("swallowed")
"""
    result = run("--allow-unused", "--", sys.executable, "-c", misspelled)
    assert result.returncode == 3, result.stderr
    assert "other error answers: 404 x1" in result.stderr


@pytest.mark.slow
def test_a_redirect_the_client_follows_to_its_answer_is_no_request_without_one() -> None:
    """An endpoint's path with a trailing slash is redirected to the endpoint (307), as
    vLLM (FastAPI) does, and openai-python follows it to its answer: a faithful rescoring
    passes (it failed with "1 cut off in flight")."""
    slashed = ALL.replace(
        'client.completions.create(model="demo/tiny-chat-model", prompt=prompt)',
        'print(client.post("/completions/", cast_to=object, body={"model": '
        '"demo/tiny-chat-model", "prompt": prompt})["choices"][0]["text"])')
    assert slashed != ALL
    result = run("--", sys.executable, "-c", slashed)
    assert result.returncode == 0, result.stderr
    assert "got no answer" not in result.stderr


@pytest.mark.slow
def test_stop_on_miss_counts_only_requests_with_an_outcome() -> None:
    """A request begun but not sent whole when COMMAND is stopped is cut off in flight:
    it does not fail the run again."""
    script = ASK + HALF_SENT + """
import time
time.sleep(0.5)
chat('Name a colour')
time.sleep(60)
"""
    result = run("--stop-on-miss", "--", sys.executable, "-c", script)
    assert result.returncode == 3, result.stderr
    assert "requests: 1 (0 answered from the saved run, 1 got no saved generation)" in result.stderr
    assert "1 more request(s) reached the server and got no answer: 1 cut off in flight " \
        "(begun, never received whole: its client left or stopped sending); run stopped " \
        "COMMAND (see below): they do not fail it again" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("over", ["the saved file", "the same file by another path",
                                  "the index file", "the index's saved file",
                                  "the saved file of an index built in its folder"])
def test_the_report_never_replaces_an_input(tmp_path: Path, over: str) -> None:
    saved = tmp_path / "saved.jsonl"
    saved.write_bytes((ROOT / "examples" / "demo-run.jsonl").read_bytes())
    inputs = [str(saved)]
    if "index" in over:  # built from the absolute path, or in its folder from `saved.jsonl`
        here = "in its folder" in over
        built = subprocess.run([*CLI[:3], "index", saved.name if here else str(saved), "-o",
                                str(tmp_path / "run.idx")], capture_output=True, text=True,
                               cwd=tmp_path if here else ROOT)
        assert built.returncode == 0, built.stderr
        inputs = [str(tmp_path / "run.idx")]
    target = {"the saved file": str(saved), "the index's saved file": str(saved),
              "the saved file of an index built in its folder": str(saved),
              "the same file by another path": str(tmp_path / "." / ".." / tmp_path.name /
                                                   "saved.jsonl"),
              "the index file": str(tmp_path / "run.idx")}[over]
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    marker = tmp_path / "command-ran"
    result = subprocess.run(
        [*CLI[:3], "run", *inputs, "--report", target, "--", sys.executable, "-c",
         f"open({str(marker)!r}, 'w')"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "is one of the inputs" in result.stderr
    assert not marker.exists()
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.slow
def test_every_base_url_variable_points_at_the_replay_whatever_it_held() -> None:
    """A stale value of any of them would send a harness elsewhere (or hang it)."""
    from replay_server.commands.base_urls import VARIABLES

    named = ["FAKE_BASE_URL", "MY_URL"]
    stale = {v.name: "http://127.0.0.1:9/v1" for v in VARIABLES}
    stale.update({v.key: "sk-stale" for v in VARIABLES if v.key},
                 FAKE_BASE_URL="http://127.0.0.1:9/v1", FAKE_API_KEY="sk-stale",
                 MY_URL="http://127.0.0.1:9", MODELSCOPE_SDK_TOKEN="hub-login")
    show = "import json, os; print(json.dumps(dict(os.environ)))"
    args = [arg for name in named for arg in ("--base-url-var", name)]
    result = subprocess.run([*CLI, *args, "--allow-unused", "--", sys.executable, "-c",
                             ASK + "chat('Write a haiku about rescoring.')\n" + show],
                            capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={**os.environ, **stale})
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    url = seen["OPENAI_BASE_URL"]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1") and ":9/" not in url
    forms = {"v1": url, "root": url.removesuffix("/v1"),
             "v1beta": url.removesuffix("/v1") + "/v1beta", "unset": None}
    for variable in VARIABLES:
        assert seen.get(variable.name) == forms[variable.form]
        if variable.key:
            assert seen[variable.key] == "replay-server"
    assert seen["FAKE_BASE_URL"] == seen["MY_URL"] == url
    assert seen["FAKE_API_KEY"] == "replay-server" and "MY_API_KEY" not in seen
    assert seen["MODELSCOPE_SDK_TOKEN"] == "hub-login"  # also the ModelScope hub login


def test_a_bad_base_url_variable_name_is_a_bad_option() -> None:
    result = run("--base-url-var", "NOT-A-NAME", "--", sys.executable, "-c", "pass")
    assert result.returncode == 2 and "--base-url-var 'NOT-A-NAME'" in result.stderr


def test_the_docs_list_every_base_url_variable_run_sets() -> None:
    from replay_server.commands.base_urls import markdown_table

    assert markdown_table() in docs_page("run.md")


@pytest.mark.harness
@pytest.mark.parametrize("provider", ["openai-api/vllm", "openai-api/fake"])
def test_inspect_reaches_the_replay_through_its_own_variables_when_they_are_stale(
        tmp_path: Path, provider: str) -> None:
    """inspect_ai's openai-api/SERVICE/ reads SERVICE_BASE_URL (and SERVICE_API_KEY):
    VLLM_BASE_URL is in run's table; FAKE_BASE_URL is named with --base-url-var."""
    from tests.harnesses.commands import BIN, offline_env
    from tests.harnesses.inspect_runs import read_scores

    saved = next((ROOT / "tests/data/inspect_ai/arith").glob("*.eval"))
    tasks = shutil.copytree(ROOT / "tests/data/gen/tasks", tmp_path / "tasks")
    stale = {"VLLM_BASE_URL": "http://127.0.0.1:9/v1", "VLLM_API_KEY": "stale",
             "FAKE_BASE_URL": "http://127.0.0.1:9/v1", "FAKE_API_KEY": "stale",
             "INSPECT_EVAL_MODEL_BASE_URL": "http://127.0.0.1:9/v1"}
    named = ["--base-url-var", "FAKE_BASE_URL"] if provider.endswith("fake") else []
    inspect = [str(BIN / "inspect"), "eval", "inspect_arith.py", "--model",
               f"{provider}/tiny-model", "--log-dir", str(tmp_path / "logs"), "--temperature",
               "0", "--display", "plain", "--max-retries", "1", "--timeout", "10"]
    result = subprocess.run([*CLI[:3], "run", str(saved), *named, "--", *inspect],
                            capture_output=True, text=True, cwd=tasks, timeout=300,
                            env={**offline_env(tmp_path), **stale})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "every request was answered from the saved run" in result.stderr
    scores = read_scores(tmp_path / "logs", result.stdout)
    assert scores.status == "success" and scores.metrics["includes/accuracy"] == 1 / 3


@pytest.mark.slow
def test_the_example_harness_says_what_a_miss_is_and_fails_on_one(tmp_path: Path) -> None:
    """docker/example-harness.py under `run`: it passes on the example run, and on a run
    that lacks one of its questions it fails with the status its docstring names."""
    harness = ROOT / "docker" / "example-harness.py"
    passed = subprocess.run([*CLI, "--allow-unused", "--", sys.executable, str(harness)],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert passed.returncode == 0, passed.stderr
    assert "accuracy: 3/3" in passed.stdout
    saved = tmp_path / "without-paris.jsonl"
    lines = (ROOT / "examples/demo-run.jsonl").read_text().splitlines(keepends=True)
    saved.write_text("".join(line for line in lines if "capital of France" not in line))
    missed = subprocess.run([*CLI[:3], "run", str(saved), "--", sys.executable, str(harness)],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert missed.returncode == 3, missed.stderr
    status = re.search(r"/completions: HTTP (\d+): ", missed.stderr)
    assert status is not None and "replay_no_match" in missed.stderr
    doc = ast.get_docstring(ast.parse(harness.read_text())) or ""
    assert f"HTTP {status[1]}" in doc and "422" not in doc


# a harness that resends a refused request at once (evalplus resends any API error)
RESEND = ASK + """
import sys
for _ in range(int(sys.argv[1])):
    chat('Name a colour')
print('not stopped')
"""


@pytest.mark.slow
def test_a_request_refused_again_and_again_stops_the_command_at_the_bound() -> None:
    result = run("--", sys.executable, "-c", RESEND, "400")
    assert result.returncode == 3, result.stderr
    assert "not stopped" not in result.stdout
    assert "replay-server run: stopped COMMAND when one request had been refused 50 times " \
        "(--max-attempts 50; 0 never stops): [replay_no_match] /v1/chat/completions " \
        f"model={MODEL}: " in result.stderr


@pytest.mark.slow
def test_the_bound_on_refusals_is_the_user_s() -> None:
    lower = run("--max-attempts", "5", "--", sys.executable, "-c", RESEND, "400")
    assert lower.returncode == 3 and "not stopped" not in lower.stdout
    assert "when one request had been refused 5 times (--max-attempts 5;" in lower.stderr
    never = run("--max-attempts", "0", "--", sys.executable, "-c", RESEND, "60")
    assert never.returncode == 3 and "not stopped" in never.stdout
    assert "stopped COMMAND" not in never.stderr
    assert "1 distinct request(s) got no saved generation, in 60 attempt(s)" in never.stderr


def test_the_bound_on_refusals_is_a_count() -> None:
    result = run("--max-attempts", "-1", "--", "true")
    assert result.returncode == 2 and "Invalid value for '--max-attempts'" in result.stderr


@pytest.mark.slow
def test_the_tokenizer_is_loaded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--tokenizer` is read once per process: the load of the saved run and the server
    use the same tokenizer (it was loaded for the load, then again for the app)."""
    from replay_server.commands.run import run_command
    from replay_server.saved import local_tokenizer
    from replay_server.settings import Settings

    loads: list[str] = []
    load = local_tokenizer.load_tokenizer

    def counted(path: str) -> local_tokenizer.LocalTokenizer:
        loads.append(path)
        return load(path)

    monkeypatch.setattr(local_tokenizer, "load_tokenizer", counted)
    tokenizer = str(ROOT / "tests" / "data" / "gen" / "tokenizer_bpe")
    said: list[str] = []
    code = run_command([ROOT / "examples"], Settings(tokenizer=tokenizer),
                       [sys.executable, "-c", ALL + TOKENIZE], allow_unused=False,
                       stop_on_miss=False, say=said.append)
    assert code == 0, said
    assert "tokenizer calls: 0 answered from recordings, 1 computed with --tokenizer, 0 " \
        "unanswered" in "\n".join(said)
    assert loads == [tokenizer]
