"""`replay-server run` with a harness that rescores through the batch protocols: one
missed line (a changed prompt) fails the run (exit 3) whatever the script does with the
error file; the same script with every line saved passes (exit 0)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import (
    CLI,
    ROOT,
    chat_record,
    chat_response,
    message_record,
    message_response,
    write_jsonl,
)

pytestmark = pytest.mark.http

# A harness's batch rescoring: upload, create, poll, download; errors swallowed, as
# harnesses that score a failed item as empty do.
SCRIPT = """
import io, json, sys, time, anthropic, openai
model, second = "test/model", sys.argv[1]
client = openai.OpenAI()
lines = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
          "body": {"model": model, "messages": [{"role": "user", "content": text}]}}
         for i, text in enumerate(["2+2?", second])]
data = "".join(json.dumps(line) + "\\n" for line in lines).encode()
uploaded = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                              completion_window="24h")
while batch.status not in ("completed", "failed", "expired", "cancelled"):
    time.sleep(1)
    batch = client.batches.retrieve(batch.id)
print(client.files.content(batch.output_file_id).text)
claude = anthropic.Anthropic()
made = claude.messages.batches.create(requests=[{"custom_id": "fr", "params": {
    "model": model, "max_tokens": 20,
    "messages": [{"role": "user", "content": "capital of France?"}]}}])
print([r.result.type for r in claude.messages.batches.results(made.id)])
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("run") / "saved.jsonl", [
        chat_record("2+2?", chat_response("4"), line=1),
        chat_record("3+3?", chat_response("6"), line=2),
        message_record("capital of France?", message_response("Paris."), line=3,
                       max_tokens=20)])


def run(saved: Path, second: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "run", str(saved), "--log-level", "warning", "--",
                           sys.executable, "-c", SCRIPT, second],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.slow
def test_a_batch_with_every_line_saved_passes(saved: Path) -> None:
    result = run(saved, "3+3?")
    assert result.returncode == 0, result.stderr
    assert "['succeeded']" in result.stdout
    assert "every request was answered from the saved run" in result.stderr


@pytest.mark.slow
def test_one_missed_line_of_a_batch_fails_the_run(saved: Path) -> None:
    result = run(saved, "3+3 ?")
    assert result.returncode == 3, result.stderr
    assert "['succeeded']" in result.stdout  # (the script itself went on and exited 0)
    assert "1 distinct request(s) got no saved generation" in result.stderr
