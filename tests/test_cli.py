"""The command line as users run it: a real `replay-server` process, and the README."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from replay_server import errors
from replay_server.settings import SETTINGS, flag, markdown_table

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
CLI = [sys.executable, "-m", "replay_server"]


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Run `replay-server serve ARGS --port 0` and wait for its ready line; the rest of its
    stderr is drained in the background so that its logging never blocks it."""
    proc = subprocess.Popen([*CLI, "serve", *args, "--port", "0"], cwd=ROOT, text=True,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        found = re.search(r"ready on (http://\S+/v1)", line)
        if found:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, found.group(1)
    proc.wait(10)
    proc.stderr.close()
    raise AssertionError("no ready line:\n" + "".join(lines))


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    code = proc.wait(10)
    if proc.stderr is not None:
        proc.stderr.close()
    return code


@pytest.fixture(scope="module")
def example() -> Iterator[str]:
    proc, url = start("examples/")
    yield url
    assert stop(proc) == 0


@pytest.mark.http
def test_serve_prints_a_snippet_that_works(example: str) -> None:
    r = httpx.post(example + "/completions",
                   json={"model": "demo/tiny-chat-model", "prompt": "The capital of France is"})
    assert r.json()["choices"][0]["text"] == " Paris."


@pytest.mark.http
def test_the_readme_quick_start_runs_as_written(example: str) -> None:
    code = README.split("```python\n", 1)[1].split("```", 1)[0]
    env = {**os.environ, "OPENAI_BASE_URL": example, "OPENAI_API_KEY": "replay"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines() == ["4", "2 plus 2 makes 4.", "9"]


@pytest.mark.http
def test_the_readme_miss_example_is_what_the_server_says(example: str) -> None:
    client = openai.OpenAI(base_url=example, api_key="x")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="demo/tiny-chat-model", messages=[
            {"role": "system", "content": "Answer with a number only."},
            {"role": "user", "content": "What is 2+3?"}])
    shown = README.split("openai.BadRequestError: Error code: 400 - ", 1)[1]
    shown = " ".join(shown.split("...", 1)[0].split())
    assert str(e.value).startswith("Error code: 400 - " + shown)


def test_a_bad_saved_file_stops_start_up_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"replay_record": 1, "endpoint": "/v1/chat/completions"}\n')
    result = subprocess.run([*CLI, "serve", str(path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"error: {path}:1: field `model`: missing" in result.stderr


def test_every_setting_has_help_a_flag_and_a_readme_row() -> None:
    assert markdown_table() in README
    help_text = subprocess.run([*CLI, "serve", "--help"], capture_output=True, text=True,
                               check=True).stdout
    for setting in SETTINGS:
        assert setting.metadata["help"]
        assert flag(setting.name) in help_text


def test_the_readme_lists_every_replay_error_code() -> None:
    codes = [c.code for c in vars(errors).values()
             if isinstance(c, type) and issubclass(c, errors.ReplayError)
             and c is not errors.ReplayError]
    assert codes and all(f"`{code}`" in README for code in codes)
