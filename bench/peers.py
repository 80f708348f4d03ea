"""The peers users would pick instead of replay-server, loaded with the same saved answers.

Each peer is given the first 2,000 saved chat answers of the throughput run (those the
`chat` and `chat-stream` workloads ask for) and measured beside replay-server by
bench/run.py, when it is installed:

- WireMock (npm `wiremock`, which bundles the standalone jar; run on Java 11+ with
  `java -jar`), in playback of the recorded exchanges: one stub mapping per exchange
  replay-server answered (request and answer bytes recorded from it before the rounds),
  matching the request body with strict `equalToJson` and answering the recorded body
  (a stream as its bytes, whole).
- Mockoon's CLI (npm `@mockoon/cli`): one environment with one route per endpoint, one
  response per recorded exchange, chosen by a body rule (`equals` on the request body),
  templating off, `FALLBACK` mode (a request no rule matches gets a 404, never the first
  answer).
- aimock (npm `@copilotkit/aimock`, command `llmock`): fixtures keyed on the last user
  message, the answer's text.
- mockllm (PyPI `mockllm`): a responses file keyed on the last user message. It re-reads
  and re-parses the whole file on every request, so it is measured at `MOCKLLM_ANSWERS`
  answers (what it answers within wrk's 2 s timeout at c=64), beside replay-server serving
  a run of the same answers.

Install them outside the repository (the bench finds them there, or on PATH, or where a
flag of bench/run.py says: --wiremock, --mockoon, --llmock, --mockllm-python):

    apt-get install -y default-jre-headless wrk
    mkdir -p ~/.cache/replay-server-bench && cd ~/.cache/replay-server-bench
    npm install wiremock@3.13.2 @mockoon/cli@9.9.0 @copilotkit/aimock@1.43.0
    python3 -m venv mockllm && mockllm/bin/pip install mockllm==0.0.8

Before the rounds each peer is sent a few of its requests (the first, the last and some
between) and must answer each with its saved answer's text (streams: the text of their
deltas), so that a peer answering 404s or wrong answers fast is never reported as fast.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

CACHE = Path.home() / ".cache" / "replay-server-bench"
CHAT = "/v1/chat/completions"
WORKS = ("chat", "chat-stream")
MOCKLLM_ANSWERS = 10
JSON = {"content-type": "application/json"}


def installed(command: str) -> str | None:
    """`command` on PATH, else in the bench's npm folder (see Install above)."""
    local = CACHE / "node_modules" / ".bin" / command
    return shutil.which(command) or (str(local) if local.exists() else None)


def mockllm_python() -> str | None:
    """The Python of the mockllm virtual environment of Install above, if it is there."""
    python = CACHE / "mockllm" / "bin" / "python"
    return str(python) if python.exists() else None


def _no_files(url: str, bodies: dict[str, Path]) -> None:
    pass


@dataclass
class Peer:
    """A server measured beside replay-server: `{port}` in its argv is its port; `files`
    writes what it serves from replay-server's URL and the workloads' request bodies,
    before it starts; it is sent the first `count` of a workload's requests."""

    name: str
    argv: list[str]
    works: tuple[str, ...]
    answers: dict[str, str]  # last user message -> the saved answer's text (checked)
    files: Callable[[str, dict[str, Path]], None] = _no_files
    count: int = 2000
    bodies: dict[str, Path] = field(default_factory=dict)  # its requests, by workload

    def prepare(self, url: str, bodies: dict[str, Path]) -> None:
        """Its files, and its requests: the first `count` of each workload's, in an order
        shuffled once (seeded). A peer that tries its stubs one after another and gets
        through a few hundred requests in a round would otherwise be sent only the
        requests of its first stubs, and charged for the shortest searches."""
        for work in self.works:
            lines = bodies[work].read_bytes().splitlines()[:self.count]
            random.Random(0).shuffle(lines)
            slug = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
            self.bodies[work] = bodies[work].with_name(f"bodies-{slug}-{work}.txt")
            self.bodies[work].write_bytes(b"\n".join(lines) + b"\n")
        self.files(url, bodies)


# ---------------------------------------------------------------- saved answers


def last_user_message(request: dict[str, Any]) -> str:
    return str(request["messages"][-1]["content"])


def chat_records(run: Path, count: int = 2000) -> list[tuple[bytes, dict[str, Any]]]:
    """The first `count` non-streamed chat records of the run, each with its line: the
    prompts the `chat` and `chat-stream` workloads send, in the same order."""
    found = []
    with run.open("rb") as f:
        for line in f:
            record = orjson.loads(line)
            if record["endpoint"] == CHAT and "stream" not in record:
                found.append((line.rstrip(b"\n"), record))
                if len(found) >= count:
                    break
    return found


def saved_answers(records: list[tuple[bytes, dict[str, Any]]]) -> dict[str, str]:
    """Last user message -> the saved answer's text."""
    return {last_user_message(r["request"]): r["response"]["choices"][0]["message"]["content"]
            for _, r in records}


def recorded(url: str, bodies: Path) -> Iterator[tuple[bytes, httpx.Response]]:
    """Each request body with replay-server's answer to it: the recorded exchanges."""
    with httpx.Client(base_url=url, timeout=60) as client:
        for body in bodies.read_bytes().splitlines():
            answer = client.post(CHAT, content=body, headers=JSON)
            if answer.status_code != 200:
                raise RuntimeError(f"recording for the peers: replay-server answered "
                                   f"{answer.status_code}: {answer.text[:300]}")
            yield body, answer


# ---------------------------------------------------------------- the peers


def wiremock(command: str, data: Path, answers: dict[str, str]) -> Peer:
    """WireMock's standalone jar, run by `java -jar` itself (the npm command's Node wrapper
    does not pass SIGTERM on to Java); `command` is that npm command or the jar."""
    jar = Path(command).resolve()
    if jar.suffix != ".jar":  # node_modules/wiremock/index.js -> build/wiremock-*.jar
        jar = next(jar.parent.glob("build/wiremock-standalone-*.jar"))
    root = data / "wiremock"

    def files(url: str, bodies: dict[str, Path]) -> None:
        mappings = [{"request": {"method": "POST", "url": CHAT,
                                 "bodyPatterns": [{"equalToJson": body.decode()}]},
                     "response": {"status": answer.status_code, "body": answer.text,
                                  "headers": {"content-type": answer.headers["content-type"]}}}
                    for work in WORKS for body, answer in recorded(url, bodies[work])]
        (root / "mappings").mkdir(parents=True, exist_ok=True)
        (root / "mappings" / "bench.json").write_bytes(orjson.dumps({"mappings": mappings}))

    java = shutil.which("java") or "java"
    return Peer("WireMock (peer)", [java, "-jar", str(jar), "--port", "{port}",
                                    "--bind-address", "127.0.0.1", "--root-dir", str(root),
                                    "--no-request-journal", "--disable-banner"],
                WORKS, answers, files)


def _mockoon_response(body: bytes, answer: httpx.Response) -> dict[str, Any]:
    return {"uuid": str(uuid.uuid4()), "body": answer.text, "latency": 0,
            "statusCode": answer.status_code, "label": "",
            "headers": [{"key": "content-type", "value": answer.headers["content-type"]}],
            "bodyType": "INLINE", "filePath": "", "databucketID": "", "sendFileAsBody": False,
            "rules": [{"target": "body", "modifier": "", "value": body.decode(),
                       "invert": False, "operator": "equals"}],
            "rulesOperator": "AND", "disableTemplating": True, "fallbackTo404": False,
            "default": False, "crudKey": "id", "callbacks": []}


def mockoon(command: str, data: Path, answers: dict[str, str]) -> Peer:
    environment = data / "mockoon-environment.json"

    def files(url: str, bodies: dict[str, Path]) -> None:
        route = {"uuid": str(uuid.uuid4()), "type": "http", "documentation": "",
                 "method": "post", "endpoint": CHAT.lstrip("/"),
                 "responses": [_mockoon_response(body, answer) for work in WORKS
                               for body, answer in recorded(url, bodies[work])],
                 "responseMode": "FALLBACK", "streamingMode": None, "streamingInterval": 0}
        environment.write_bytes(orjson.dumps({
            "uuid": str(uuid.uuid4()), "lastMigration": 33, "name": "replay-server bench",
            "endpointPrefix": "", "latency": 0, "port": 3000, "hostname": "127.0.0.1",
            "folders": [], "routes": [route],
            "rootChildren": [{"type": "route", "uuid": route["uuid"]}], "proxyMode": False,
            "proxyHost": "", "proxyRemovePrefix": False,
            "tlsOptions": {"enabled": False, "type": "CERT", "pfxPath": "", "certPath": "",
                           "keyPath": "", "caPath": "", "passphrase": ""},
            "cors": False, "headers": [], "proxyReqHeaders": [], "proxyResHeaders": [],
            "data": [], "callbacks": []}))

    return Peer("Mockoon CLI (peer)", [command, "start", "--data", str(environment),
                                       "--port", "{port}", "--disable-log-to-file"],
                WORKS, answers, files)


def aimock(command: str, data: Path, answers: dict[str, str]) -> Peer:
    fixtures = data / "aimock-fixtures.json"
    fixtures.write_bytes(orjson.dumps({"fixtures": [
        {"match": {"userMessage": q}, "response": {"content": a}} for q, a in answers.items()]}))
    return Peer("aimock (peer)", [command, "--port", "{port}", "-f", str(fixtures),
                                  "--log-level", "warn"], WORKS, answers)


def mockllm(python: str, data: Path, records: list[tuple[bytes, dict[str, Any]]]
            ) -> list[Peer]:
    """mockllm at MOCKLLM_ANSWERS answers, and replay-server serving a run of the same."""
    import yaml  # the test extras have it; keys over 1024 characters need YAML's `? `

    few = records[:MOCKLLM_ANSWERS]
    answers = saved_answers(few)
    responses = data / "mockllm-responses.yml"
    responses.write_text(yaml.safe_dump({"responses": answers}, width=1 << 20))
    small = data / f"run-chat{MOCKLLM_ANSWERS}.jsonl"
    small.write_bytes(b"".join(line + b"\n" for line, _ in few))
    argv = ["env", f"MOCKLLM_RESPONSES_FILE={responses}", python, "-m", "uvicorn",
            "mockllm.server:app", "--port", "{port}", "--no-access-log",
            "--log-level", "warning"]
    ours = [sys.executable, "-m", "replay_server", "serve", str(small), "--port", "{port}",
            "--log-level", "error"]
    return [Peer(f"mockllm (peer), {MOCKLLM_ANSWERS} answers", argv, ("chat",), answers,
                 count=MOCKLLM_ANSWERS),
            Peer(f"replay-server, {MOCKLLM_ANSWERS} answers", ours, ("chat",), answers,
                 count=MOCKLLM_ANSWERS)]


# ---------------------------------------------------------------- checked before timed


def answer_text(body: bytes) -> str:
    """The answer's text: the message's, or a stream's deltas' joined."""
    if not body.startswith(b"data:"):
        return str(orjson.loads(body)["choices"][0]["message"]["content"])
    parts = []
    for line in body.splitlines():
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            for choice in orjson.loads(line[5:])["choices"]:
                parts.append(choice.get("delta", {}).get("content") or "")
    return "".join(parts)


def check(peer: Peer, url: str) -> None:
    """A few of the peer's requests (the first, the last and three between) must get
    their saved answer's text, with status 200."""
    with httpx.Client(base_url=url, timeout=60) as client:
        for work in peer.works:
            lines = peer.bodies[work].read_bytes().splitlines()
            for i in sorted({0, len(lines) // 4, len(lines) // 2, 3 * len(lines) // 4,
                             len(lines) - 1}):
                request = orjson.loads(lines[i])
                got = client.post(CHAT, content=lines[i], headers=JSON)
                expected = peer.answers[last_user_message(request)]
                if got.status_code != 200 or answer_text(got.content) != expected:
                    raise RuntimeError(f"{peer.name}, {work}, request {i + 1}: answered "
                                       f"{got.status_code} {got.text[:300]!r}, not the "
                                       f"saved answer {expected[:100]!r}")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, step: float = 0.5, busy: float = 0.1, limit: float = 600) -> None:
    """Returns once the process has stopped working (under `busy` of a core for `step`
    seconds). A peer slower than wrk's timeout goes on answering, after wrk stops, the
    requests wrk gave up on: on the servers' core, in the next cell's time."""
    deadline = time.monotonic() + limit
    last = _cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(step)
        now = _cpu_seconds(pid)
        if now - last < busy * step:
            return
        last = now
    raise RuntimeError(f"process {pid} still busy {limit:.0f} s after its requests")


def all_installed(run: Path, data: Path, wiremock_command: str | None,
                  mockoon_command: str | None, llmock: str | None,
                  mockllm_python_: str | None) -> list[Peer]:
    """The installed peers, loaded with the run's first 2,000 chat answers."""
    records = chat_records(run)
    answers = saved_answers(records)
    found = []
    if wiremock_command:
        found.append(wiremock(wiremock_command, data, answers))
    if mockoon_command:
        found.append(mockoon(mockoon_command, data, answers))
    if llmock:
        found.append(aimock(llmock, data, answers))
    if mockllm_python_:
        found += mockllm(mockllm_python_, data, records)
    return found
