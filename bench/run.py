"""The benchmark: replay-server beside raw ASGI ceilings, measured in the same run.

Machines here are shared and noisy, so every figure is reported as a ratio against a
baseline measured in the same run, rounds are interleaved (each replay cell right after
its own ceiling), and medians of the per-round ratios are kept.

    python bench/run.py [--quick] [--sizes 100000,1000000] [--rounds 3] [--duration 5]

Throughput: wrk (a compiled load generator) POSTs realistic bodies (about 1.5 KB of
messages, 1 KB answers) to servers on 127.0.0.1; each server runs on core 0 and wrk on
core 1 (taskset). Workloads: chat; chat streamed from a non-streamed record, in small
deltas; chat streamed from a recorded stream, its frames as saved; completions, one prompt
per request and a batch of 8; /v1/responses, plain and streamed; misses; at concurrency 1
and 64. Ceilings (bench/baseline.py, raw ASGI returning fixed bytes on the same uvicorn
settings): the chat ceiling (a 1.2 KB chat body), and per workload a same-bytes ceiling
that sends the exact status, headers and body replay-server sent for one request of that
workload (captured before the rounds), so that a 50 KB stream is compared with sending
50 KB. Workers: the same run compiled to an index file, served with --workers 1 and 2.
Peers (`mockllm`, aimock's `llmock`) when they are installed.

Index: synthetic runs of each size (bench/gen_run.py): load time vs orjson's raw parse
of the same file, resident memory vs the file's size, time until the server answers its
first request, from the files and from an index file (`replay-server index`, whose reads
of the saved files are counted).

Writes bench/results/report.md (and throughput.png when matplotlib is installed), a
targets table first.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / ".data"
RESULTS = HERE / "results"
PY = sys.executable
MODEL = "bench/model"
TASKSET = shutil.which("taskset")
JSON = {"content-type": "application/json"}


def pinned(cpu: int | None, argv: list[str]) -> list[str]:
    if cpu is None or not TASKSET or (os.cpu_count() or 1) < 2:
        return argv
    return [TASKSET, "-c", str(cpu), *argv]


# ---------------------------------------------------------------- servers and load


@dataclass
class Server:
    name: str
    argv: list[str]
    cpu: int | None = 0  # None: not pinned
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0

    def start(self, port: int) -> None:
        self.port = port
        argv = [a.replace("{port}", str(port)) for a in self.argv]
        self.proc = subprocess.Popen(pinned(self.cpu, argv), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=ROOT,
                                     env={**os.environ, **self.env})
        wait_until_up(f"http://127.0.0.1:{port}/health", self.proc)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} never answered")


@dataclass
class Measure:
    rps: float
    p50_ms: float
    p99_ms: float
    non_2xx: int


def _ms(value: str) -> float:
    found = re.match(r"([\d.]+)(\w+)", value)
    if found is None:
        return float("nan")
    number, unit = found.groups()
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def _field(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    return found.group(1) if found else "nan"


def wrk(url: str, bodies: Path, connections: int, seconds: int) -> Measure:
    """wrk on core 1, POSTing the lines of `bodies` in turn (the URL's query string is
    sent as it is: post.lua keeps wrk.path, which holds it)."""
    argv = pinned(1, ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency",
                      "-s", str(HERE / "post.lua"), url, "--", str(bodies)])
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    if "Requests/sec" not in out:  # wrk failed outright: measure once more
        out = subprocess.run(argv, capture_output=True, text=True).stdout
    return Measure(float(_field(r"Requests/sec:\s+([\d.]+)", out)),
                   _ms(_field(r"(?m)^\s+50%\s+(\S+)", out)),
                   _ms(_field(r"(?m)^\s+99%\s+(\S+)", out)),
                   int(_field(r"Non-2xx or 3xx responses:\s+(\d+)", out).replace("nan", "0")))


# ---------------------------------------------------------------- workloads


def ensure_run(records: int, mixed: bool = False) -> Path:
    """A synthetic run; `mixed` adds /v1/responses records and recorded chat streams (the
    throughput run), else chat and completions only (the index figures, comparable over
    time)."""
    DATA.mkdir(exist_ok=True)
    path = DATA / f"run{records}{'-mixed' if mixed else ''}.jsonl"
    if not path.exists():
        print(f"generating {path} ({records} records)...", flush=True)
        extra = ["--responses-share", "0.2", "--recorded-streams-share", "0.2"] if mixed else []
        subprocess.run([PY, str(HERE / "gen_run.py"), str(path), "--records", str(records),
                        *extra], check=True, cwd=ROOT)
    return path


PATHS = {"chat": "/v1/chat/completions", "chat-stream": "/v1/chat/completions",
         "chat-stream-recorded": "/v1/chat/completions",
         "completions": "/v1/completions", "completions-batch8": "/v1/completions",
         "responses": "/v1/responses", "responses-stream": "/v1/responses",
         "miss": "/v1/chat/completions"}


def workload_bodies(run: Path, count: int = 2000) -> dict[str, Path]:
    chats: list[dict[str, Any]] = []
    streamed: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    prompts: list[Any] = []
    with run.open("rb") as f:
        for line in f:
            record = orjson.loads(line)
            endpoint = record["endpoint"]
            if endpoint == "/v1/chat/completions" and "stream" in record:
                if len(streamed) < count:
                    streamed.append(record["request"])
            elif endpoint == "/v1/chat/completions" and len(chats) < count:
                chats.append(record["request"])
            elif endpoint == "/v1/completions" and len(prompts) < count:
                prompts.append(record["request"]["prompt"])
            elif endpoint == "/v1/responses" and len(responses) < count:
                responses.append(record["request"])
    chat = [{"model": MODEL, "messages": r["messages"], "max_tokens": 512, "temperature": 0.0}
            for r in chats]
    batched = prompts[:len(prompts) // 8 * 8]  # the same prompts, one or eight a request
    bodies = {
        "chat": chat,
        "chat-stream": [{**b, "stream": True} for b in chat],
        "chat-stream-recorded": [{**r, "stream": True} for r in streamed],
        "completions": [{"model": MODEL, "prompt": p, "max_tokens": 256} for p in batched],
        "completions-batch8": [{"model": MODEL, "prompt": batched[i:i + 8], "max_tokens": 256}
                               for i in range(0, len(batched), 8)],
        "responses": responses,
        "responses-stream": [{**r, "stream": True} for r in responses],
        "miss": [{**b, "messages": [*b["messages"][:-1],
                                    {**b["messages"][-1],
                                     "content": b["messages"][-1]["content"] + " "}]}
                 for b in chat],
    }
    assert set(bodies) == set(PATHS)
    out = {}
    for name, items in bodies.items():
        path = DATA / f"bodies-{name}.txt"
        path.write_bytes(b"\n".join(orjson.dumps(b) for b in items) + b"\n")
        out[name] = path
    return out


def first_body(bodies: Path) -> bytes:
    with bodies.open("rb") as f:
        return f.readline().rstrip(b"\n")


# Headers that uvicorn writes itself, for replay-server and the ceiling alike.
_OWN_HEADERS = {b"date", b"server", b"transfer-encoding"}


def capture(replay: Server, bodies: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """One answer of replay-server per workload, as the same-bytes ceiling will send it;
    it checks on the way that replay-server ignores the query string that names the
    workload on the ceiling (the same URL is sent to both)."""
    payloads: dict[str, dict[str, Any]] = {}
    for work, path in PATHS.items():
        body = first_body(bodies[work])
        named = httpx.post(replay.url(f"{path}?w={work}"), content=body, headers=JSON,
                           timeout=600)
        plain = httpx.post(replay.url(path), content=body, headers=JSON, timeout=600)
        if (named.status_code, named.content) != (plain.status_code, plain.content):
            raise RuntimeError(f"{work}: replay-server answers differently with a query "
                               "string; the same-bytes ceiling cannot be compared")
        if named.status_code != (400 if work == "miss" else 200):
            raise RuntimeError(f"{work}: replay-server answered {named.status_code}: "
                               f"{named.text[:300]}")
        raw = named.headers.raw
        payloads[work] = {
            "status": named.status_code,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in raw
                        if k.lower() not in _OWN_HEADERS],
            "body_b64": base64.b64encode(named.content).decode(),
            "bytes": len(named.content),
            "chunked": any(k.lower() == b"transfer-encoding" for k, _ in raw)}
    return payloads


def check_ceiling(ceiling: Server, bodies: dict[str, Path],
                  payloads: dict[str, dict[str, Any]]) -> int:
    """The same-bytes ceiling sends what replay-server sent: status, headers (uvicorn's
    `date` aside), framing and body. Returns the size of the chat ceiling's body."""
    for work, path in PATHS.items():
        r = httpx.post(ceiling.url(f"{path}?w={work}"), content=first_body(bodies[work]),
                       headers=JSON, timeout=60)
        saved = payloads[work]
        headers = sorted((k.lower(), v) for k, v in r.headers.raw if k.lower() != b"date")
        expected = sorted([(k.encode("latin-1"), v.encode("latin-1"))
                           for k, v in saved["headers"]] + [(b"server", b"uvicorn")]
                          + ([(b"transfer-encoding", b"chunked")] if saved["chunked"] else []))
        if (r.status_code, r.content, headers) != (saved["status"],
                                                   base64.b64decode(saved["body_b64"]),
                                                   expected):
            raise RuntimeError(f"{work}: the same-bytes ceiling does not send what "
                               f"replay-server sent: {headers} vs {expected}")
    chat = httpx.post(ceiling.url(PATHS["chat"]), content=first_body(bodies["chat"]),
                      headers=JSON, timeout=60)
    return len(chat.content)


def peer_answers(run: Path, count: int = 2000) -> dict[str, str]:
    """Last user message -> saved answer, for the chat prompts the workloads send."""
    answers: dict[str, str] = {}
    with run.open("rb") as f:
        for line in f:
            record = orjson.loads(line)
            if record["endpoint"] == "/v1/chat/completions" and "stream" not in record:
                last = record["request"]["messages"][-1]["content"]
                answers[last] = record["response"]["choices"][0]["message"]["content"]
                if len(answers) >= count:
                    break
    return answers


def peers(run: Path, mockllm_python: str | None, llmock: str | None) -> list[tuple[Server, str]]:
    """Peer mocks, when installed, loaded with the same prompts and answers (each keys on
    the last user message): (server, workload)."""
    found: list[tuple[Server, str]] = []
    answers = peer_answers(run) if (mockllm_python or llmock) else {}
    if llmock:
        fixtures = DATA / "aimock-fixtures.json"
        fixtures.write_bytes(orjson.dumps({"fixtures": [
            {"match": {"userMessage": q}, "response": {"content": a}}
            for q, a in answers.items()]}))
        aimock = Server("aimock (peer)", [llmock, "--port", "{port}", "-f", str(fixtures),
                                          "--log-level", "warn"])
        found += [(aimock, "chat"), (aimock, "chat-stream")]
    if mockllm_python:
        import yaml  # the test extras have it; keys over 1024 characters need YAML's `? `

        responses = DATA / "mockllm-responses.yml"
        responses.write_text(yaml.safe_dump({"responses": answers}, width=1 << 20))
        argv = ["env", f"MOCKLLM_RESPONSES_FILE={responses}", mockllm_python, "-m", "uvicorn",
                "mockllm.server:app", "--port", "{port}", "--no-access-log",
                "--log-level", "warning"]
        found.append((Server("mockllm (peer)", argv), "chat"))
    return found


def ensure_index(run: Path) -> tuple[Path, int]:
    """The run compiled to an index file, and how many of its prompts need the repeats
    cursor (several workers refuse a run that does)."""
    idx = run.with_suffix(".idx")
    if not idx.exists() or idx.stat().st_mtime < run.stat().st_mtime:
        print(f"indexing {run}...", flush=True)
        subprocess.run([PY, "-m", "replay_server", "index", str(run), "-o", str(idx)],
                       cwd=ROOT, check=True, capture_output=True)
    db = sqlite3.connect(f"file:{idx}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT value FROM meta WHERE name = 'cursor_prompts'").fetchone()
    finally:
        db.close()
    return idx, int(row[0]) if row else -1


# ---------------------------------------------------------------- throughput

CEILING = "ceiling (raw ASGI)"
SAME = "ceiling, same bytes"
REPLAY = "replay-server"
WORKERS = {1: "replay-server, index, --workers 1", 2: "replay-server, index, --workers 2"}


@dataclass
class Throughput:
    results: dict[tuple[str, str, int], list[Measure]]
    payloads: dict[str, dict[str, Any]]
    ceiling_bytes: int
    cursor_prompts: int
    peer_names: list[str]

    def measures(self, system: str, work: str, c: int) -> list[Measure]:
        return self.results.get((system, work, c), [])

    def median(self, system: str, work: str, c: int,
               key: Callable[[Measure], float] = lambda m: m.rps) -> float:
        runs = self.measures(system, work, c)
        return statistics.median(key(m) for m in runs) if runs else float("nan")

    def ratios(self, num: tuple[str, str, int], den: tuple[str, str, int],
               key: Callable[[Measure], float] = lambda m: m.rps, scale: float = 1.0
               ) -> list[float]:
        """num / den in each round, the two measured side by side."""
        return [scale * key(a) / key(b) for a, b in zip(self.results.get(num, []),
                                                        self.results.get(den, []),
                                                        strict=False)
                if key(b) > 0 and key(a) == key(a)]

    def ratio(self, num: tuple[str, str, int], den: tuple[str, str, int],
              key: Callable[[Measure], float] = lambda m: m.rps, scale: float = 1.0) -> float:
        """The median over rounds of num / den."""
        pairs = self.ratios(num, den, key, scale)
        return statistics.median(pairs) if pairs else float("nan")

    def spread(self, num: tuple[str, str, int], den: tuple[str, str, int],
               scale: float = 1.0) -> str:
        """The lowest and highest of the rounds' ratios."""
        pairs = self.ratios(num, den, scale=scale)
        return f"{min(pairs):.2f}–{max(pairs):.2f}" if len(pairs) > 1 else "—"


def throughput(run: Path, rounds: int, seconds: int,
               peer_servers: list[tuple[Server, str]], works: list[str] | None = None,
               levels: tuple[int, ...] = (1, 64)) -> Throughput:
    """Every workload (or `works`, without the workers) at each concurrency of `levels`."""
    bodies = workload_bodies(run)
    idx, cursor_prompts = ensure_index(run)
    payload_file = DATA / "ceiling-payloads.json"
    uvicorn_args = ["--no-access-log", "--log-level", "warning"]
    base = Server(CEILING, [PY, "-m", "uvicorn", "bench.baseline:app", "--port", "{port}",
                            *uvicorn_args], env={"BENCH_PAYLOADS": str(payload_file)})
    replay = Server(REPLAY, [PY, "-m", "replay_server", "serve", str(run), "--port",
                             "{port}", "--log-level", "error"])
    workers = {n: Server(WORKERS[n], [PY, "-m", "replay_server", "serve", str(idx), "--port",
                                      "{port}", "--log-level", "error", "--workers", str(n)],
                         cpu=None)
               for n in (1, 2) if cursor_prompts == 0 and works is None}
    servers = [replay, base, *workers.values(), *{id(s): s for s, _ in peer_servers}.values()]
    results: dict[tuple[str, str, int], list[Measure]] = {}
    payloads: dict[str, dict[str, Any]] = {}
    ceiling_bytes = 0

    def measure(server: Server, system: str, work: str, c: int, query: str = "") -> None:
        print(f"  {system} {work} c={c}", flush=True)
        results.setdefault((system, work, c), []).append(
            wrk(server.url(PATHS[work] + query), bodies[work], c, seconds))

    try:
        replay.start(18900)
        # the first miss builds the prompt catalog; the capture makes it
        payloads = capture(replay, bodies)
        payload_file.write_bytes(orjson.dumps(payloads))
        for i, server in enumerate(servers[1:], start=1):
            server.start(18900 + i)
        ceiling_bytes = check_ceiling(base, bodies, payloads)
        for server in workers.values():  # the first answer opens the index
            httpx.post(server.url(PATHS["chat"]), content=first_body(bodies["chat"]),
                       headers=JSON, timeout=60)
        for r in range(rounds):
            print(f"round {r + 1}/{rounds}", flush=True)
            flip = r % 2 == 1  # which of a pair goes first alternates between rounds
            for c in levels:
                measure(base, CEILING, "chat", c)
                for work in works or PATHS:
                    pair = [(base, SAME), (replay, REPLAY)]
                    for server, system in reversed(pair) if flip else pair:
                        measure(server, system, work, c, f"?w={work}")
                if c == 64:
                    for n in (2, 1) if flip else (1, 2):
                        if n in workers:
                            measure(workers[n], WORKERS[n], "chat", c)
                for server, work in peer_servers:
                    measure(server, server.name, work, c)
    finally:
        for server in servers:
            server.stop()
    return Throughput(results, payloads, ceiling_bytes, cursor_prompts,
                      list(dict.fromkeys(s.name for s, _ in peer_servers)))


# ---------------------------------------------------------------- index figures

_PARSE = "import orjson,sys,time\nt=time.perf_counter()\nn=0\n" \
         "with open(sys.argv[1],'rb') as f:\n    for line in f: orjson.loads(line); n+=1\n" \
         "print(n, time.perf_counter()-t)"
_LOAD = "import sys,time,gc\nfrom replay_server.index.loading import load\n" \
        "base=int(open('/proc/self/statm').read().split()[1])*4096\n" \
        "t=time.perf_counter()\nl=load([sys.argv[1]],progress=False)\n" \
        "dt=time.perf_counter()-t\ngc.collect()\n" \
        "rss=int(open('/proc/self/statm').read().split()[1])*4096\nprint(dt, rss, base)"
# `replay-server index INPUTS -o OUT`, counting what it reads of the saved files: every
# binary read-only open of one goes through a FileIO that adds up the bytes it returns
# (what Python's buffered readers read from the file), and an audit hook counts every
# open of one by any means, so that a read around the counter would show.
_INDEX = r'''
import io, json, os, sys
inputs = {os.path.realpath(p): {"opens": 0, "counted_opens": 0, "bytes": 0}
          for p in sys.argv[1:-1]}

def _real(file):
    try:
        return os.path.realpath(os.fsdecode(file))
    except (TypeError, ValueError):
        return None

def _hook(event, args):
    if event == "open" and not isinstance(args[0], int):
        seen = inputs.get(_real(args[0]))
        if seen is not None:
            seen["opens"] += 1

class Counted(io.FileIO):
    def readinto(self, buffer):
        n = super().readinto(buffer)
        self.seen["bytes"] += n or 0
        return n
    def read(self, size=-1):
        data = super().read(size)
        self.seen["bytes"] += len(data or b"")
        return data
    def readall(self):
        data = super().readall()
        self.seen["bytes"] += len(data)
        return data

_open = io.open
def _counting_open(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
                   closefd=True, opener=None):
    if not isinstance(file, int) and opener is None and sorted(mode) == ["b", "r"]:
        seen = inputs.get(_real(file))
        if seen is not None:
            seen["counted_opens"] += 1
            raw = Counted(file, "rb")
            raw.seen = seen
            size = buffering if buffering > 1 else \
                max(os.fstat(raw.fileno()).st_blksize, io.DEFAULT_BUFFER_SIZE)
            return io.BufferedReader(raw, size)
    return _open(file, mode, buffering, encoding, errors, newline, closefd, opener)

io.open = _counting_open
import builtins
builtins.open = _counting_open
sys.addaudithook(_hook)
from replay_server.cli import main
code = 0
try:
    main(["index", *sys.argv[1:-1], "-o", sys.argv[-1]], prog_name="replay-server")
except SystemExit as e:
    code = e.code
print(json.dumps(list(inputs.values())))
sys.exit(code)
'''


def _status(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) * 1024  # type: ignore
            for k in ("VmRSS", "RssAnon", "RssFile")}


def first_answer(target: Path, run: Path) -> tuple[float, dict[str, int]]:
    """Seconds from starting `serve` until it answers a saved prompt, and its memory then."""
    with run.open("rb") as f:
        request = orjson.loads(f.readline())["request"]
    start = time.monotonic()
    proc = subprocess.Popen([PY, "-m", "replay_server", "serve", str(target), "--port", "18990",
                             "--log-level", "error"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        path = "/v1/chat/completions" if "messages" in request else "/v1/completions"
        while True:
            try:
                r = httpx.post(f"http://127.0.0.1:18990{path}", json=request, timeout=5)
                if r.status_code == 200:
                    break
            except httpx.HTTPError:
                if proc.poll() is not None:
                    raise RuntimeError("serve exited") from None
                time.sleep(0.02)
        elapsed = time.monotonic() - start
        return elapsed, _status(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)


def index_figures(size: int) -> dict[str, Any]:
    run = ensure_run(size)
    file_bytes = run.stat().st_size
    print(f"index figures: {size} records", flush=True)
    n, parse_s = subprocess.run([PY, "-c", _PARSE, str(run)], capture_output=True, text=True,
                                check=True).stdout.split()
    load_s, rss, base = map(float, subprocess.run([PY, "-c", _LOAD, str(run)], cwd=ROOT,
                                                  capture_output=True, text=True,
                                                  check=True).stdout.split())
    idx = DATA / f"run{size}.idx"
    start = time.monotonic()
    built = subprocess.run([PY, "-c", _INDEX, str(run), str(idx)], cwd=ROOT, check=True,
                           capture_output=True, text=True)
    build_s = time.monotonic() - start
    [reads] = orjson.loads(built.stdout.strip().splitlines()[-1])
    files_first, files_mem = first_answer(run, run)
    idx_first, idx_mem = first_answer(idx, run)
    return {"records": int(n), "file_bytes": file_bytes, "parse_s": float(parse_s),
            "load_s": load_s, "load_ratio": float(parse_s) / load_s,
            "rss_ratio": (rss - base) / file_bytes, "index_build_s": build_s,
            "index_read_ratio": reads["bytes"] / file_bytes, "index_opens": reads["opens"],
            "index_counted_opens": reads["counted_opens"],
            "index_bytes": idx.stat().st_size,
            "first_answer_files_s": files_first, "first_answer_index_s": idx_first,
            "serve_files_rss": files_mem["VmRSS"], "serve_index_rss": idx_mem["VmRSS"],
            "serve_index_anon": idx_mem["RssAnon"]}


def _commit() -> str:
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                            "replay_server"], capture_output=True, text=True).stdout.strip()
    return (found.stdout.strip() or "unknown") + (" (with uncommitted changes)" if dirty else "")


# ---------------------------------------------------------------- report

STREAMS = ("chat-stream", "chat-stream-recorded", "responses-stream")
ONE_M = 1_000_000


def _num(value: float, digits: int = 2) -> str:
    return "n/a" if value != value else f"{value:.{digits}f}"


def _met(value: float, limit: float, at_least: bool = True) -> str:
    if value != value:
        return "not measured"
    return "yes" if (value >= limit if at_least else value <= limit) else "**no**"


def targets(t: Throughput | None, index: list[dict[str, Any]]) -> list[str]:
    """The issue's targets (Performance II): target, measured (median), met."""
    rows: list[tuple[str, str, str, str]] = []  # target, median, rounds' spread, met
    if t is not None:
        for c in (64, 1):
            for work, limit, own in (("chat", 0.7, False), ("chat-stream", 0.6, True),
                                     ("chat-stream-recorded", 0.6, True),
                                     ("responses", 0.7, False),
                                     ("responses-stream", 0.6, True)):
                den = (SAME, work, c) if own else (CEILING, "chat", c)
                against = f"its same-bytes ceiling ({t.payloads[work]['bytes'] / 1e3:.0f} KB)" \
                    if own else "the chat ceiling"
                value = t.ratio((REPLAY, work, c), den)
                rows.append((f"{work}, c={c}: req/s >= {limit}x {against}", _num(value),
                             t.spread((REPLAY, work, c), den), _met(value, limit)))
        for c in (64, 1):
            num, den = (REPLAY, "completions-batch8", c), (REPLAY, "completions", c)
            value = t.ratio(num, den, scale=8)
            rows.append((f"completions, batch of 8, c={c}: prompts/s (req/s x 8) >= 0.7x "
                         "`completions` (one prompt a request)", _num(value),
                         t.spread(num, den, scale=8), _met(value, 0.7)))
        for c in (64, 1):
            num, den = (REPLAY, "miss", c), (REPLAY, "chat", c)
            value = t.ratio(num, den)
            rows.append((f"misses, c={c}: req/s >= 0.3x chat hits", _num(value),
                         t.spread(num, den), _met(value, 0.3)))
        if t.cursor_prompts == 0:
            num, den = (WORKERS[2], "chat", 64), (WORKERS[1], "chat", 64)
            value = t.ratio(num, den)
            rows.append(("workers: chat c=64 from the index, `--workers 2` vs 1 (no target; "
                         "the client shares a core with a worker: see Workers)",
                         f"{_num(value)} ({t.median(*num):.0f} vs {t.median(*den):.0f} req/s)",
                         t.spread(num, den), "reported"))
        rows.append(("peers side by side (throughput table)", ", ".join(t.peer_names)
                     or "none installed (--mockllm-python, llmock on PATH)", "—",
                     "reported" if t.peer_names else "not measured"))
    for i in index:
        n = i["records"]
        rows.append((f"load, {n} records: rate >= 0.5x orjson's parse of the file",
                     _num(i["load_ratio"]), "—", _met(i["load_ratio"], 0.5)))
    for i in index:
        value = i["serve_files_rss"] / i["file_bytes"]
        rows.append((f"serve from files, {i['records']} records: RSS <= 0.5x the file",
                     _num(value), "—", _met(value, 0.5, at_least=False)))
    big = [i for i in index if i["records"] >= ONE_M]
    if big:
        i = big[-1]
        rows.append((f"first answer from files, {i['records']} records: <= 10 s",
                     f"{i['first_answer_files_s']:.1f} s", "—",
                     _met(i["first_answer_files_s"], 10, at_least=False)))
        rows.append((f"`index`, {i['records']} records: <= 30 s",
                     f"{i['index_build_s']:.1f} s", "—",
                     _met(i["index_build_s"], 30, at_least=False)))
    else:
        rows.append(("first answer from files (<= 10 s) and `index` (<= 30 s), 1M records",
                     "sizes run: " + (", ".join(str(i["records"]) for i in index) or "none"),
                     "—", "not measured"))
    for i in index:
        once = i["index_opens"] == i["index_counted_opens"] and i["index_read_ratio"] < 1.01
        rows.append((f"`index`, {i['records']} records: reads each saved file once",
                     f"{i['index_read_ratio']:.4f}x the file's bytes ({i['index_opens']} "
                     "opens)", "—", "yes" if once else "**no**"))
    lines = ["| target | measured (median) | rounds (min–max) | met |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return lines


def throughput_lines(t: Throughput) -> list[str]:
    lines = ["| system | workload | c | answer bytes | req/s | x chat ceiling | "
             "x same-bytes ceiling | p50 ms | p99 ms | p99 x same-bytes | non-2xx |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (system, work, c), runs in t.results.items():
        if system in WORKERS.values():
            continue
        same = t.ratio((system, work, c), (SAME, work, c)) if system == REPLAY else float("nan")
        p99 = t.ratio((system, work, c), (SAME, work, c), key=lambda m: m.p99_ms) \
            if system == REPLAY else float("nan")
        size = t.ceiling_bytes if system == CEILING else \
            t.payloads[work]["bytes"] if system in (REPLAY, SAME) else None
        label = f"{work} (`?w={work}`)" if system == SAME else work
        lines.append(
            f"| {system} | {label} | {c} | {size if size is not None else '—'} | "
            f"{t.median(system, work, c):.0f} | "
            f"{_num(t.ratio((system, work, c), (CEILING, 'chat', c)))} | "
            f"{_num(same) if system == REPLAY else '—'} | "
            f"{t.median(system, work, c, lambda m: m.p50_ms):.2f} | "
            f"{t.median(system, work, c, lambda m: m.p99_ms):.2f} | "
            f"{_num(p99) if system == REPLAY else '—'} | {sum(m.non_2xx for m in runs)} |")
    if any(m.rps == 0 for runs in t.results.values() for m in runs):
        lines += ["", "A rate of 0 means no request completed within wrk's 2 s timeout. "
                  "mockllm 0.0.8 re-reads its whole responses file on every request (it "
                  "compares the file's float mtime with a truncated int), which takes about "
                  "1.7 s with these 2,000 answers."]
    return lines


def workers_lines(t: Throughput) -> list[str]:
    if t.cursor_prompts != 0:
        return [f"Not measured: the run's index has {t.cursor_prompts} prompt(s) that need the "
                "repeats cursor, which several workers refuse."]
    lines = ["The throughput run compiled to an index file (`replay-server index`; it reports "
             "0 prompts needing the repeats cursor: one saved answer per prompt), served with "
             "`--workers 1` and `--workers 2`, chat at c=64. The servers are not pinned (the "
             "kernel spreads the supervisor and its workers over both cores); wrk stays pinned "
             "to core 1, so with 2 workers the client shares a core with one of them: the "
             "ratio understates what a second worker gives when the client has a core (or a "
             "machine) of its own, which this 2-core machine cannot offer.", "",
             "| workers | req/s | x 1 worker | x chat ceiling (pinned, 1 core) | p50 ms | "
             "p99 ms |", "| --- | --- | --- | --- | --- | --- |"]
    for n, system in WORKERS.items():
        lines.append(f"| {n} | {t.median(system, 'chat', 64):.0f} | "
                     f"{_num(t.ratio((system, 'chat', 64), (WORKERS[1], 'chat', 64)))} | "
                     f"{_num(t.ratio((system, 'chat', 64), (CEILING, 'chat', 64)))} | "
                     f"{t.median(system, 'chat', 64, lambda m: m.p50_ms):.2f} | "
                     f"{t.median(system, 'chat', 64, lambda m: m.p99_ms):.2f} |")
    return lines


def index_lines(index: list[dict[str, Any]]) -> list[str]:
    lines = ["| records | file MB | orjson parse s | load s | load rate x parse | "
             "RSS x file (loaded) | `index` s | `index` read x file (opens) | index MB | "
             "first answer: files s | first answer: index s | serve RSS MB (x file): files | "
             "serve RSS MB (x file): index, anon |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i in index:
        size = i["file_bytes"]
        lines.append(
            f"| {i['records']} | {size / 1e6:.0f} | {i['parse_s']:.2f} | "
            f"{i['load_s']:.2f} | {i['load_ratio']:.2f} | {i['rss_ratio']:.2f} | "
            f"{i['index_build_s']:.1f} | {i['index_read_ratio']:.4f} ({i['index_opens']}) | "
            f"{i['index_bytes'] / 1e6:.0f} | {i['first_answer_files_s']:.1f} | "
            f"{i['first_answer_index_s']:.2f} | "
            f"{i['serve_files_rss'] / 1e6:.0f} ({i['serve_files_rss'] / size:.2f}) | "
            f"{i['serve_index_rss'] / 1e6:.0f} ({i['serve_index_rss'] / size:.2f}), "
            f"{i['serve_index_anon'] / 1e6:.0f} ({i['serve_index_anon'] / size:.2f}) |")
    return lines


def report(t: Throughput | None, index: list[dict[str, Any]], args: argparse.Namespace,
           seconds: float) -> str:
    lines = ["# Benchmark report", "",
             f"Generated by `make bench` (`python bench/run.py{' --quick' if args.quick else ''}"
             f"`) on {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores (1-minute load "
             f"average {args.load_before:.2f} before, {os.getloadavg()[0]:.2f} after: other "
             f"users' work shows there); {args.rounds} interleaved round(s) of {args.duration} s "
             f"per cell, medians of the per-round ratios; servers on core 0 (the workers "
             f"aside), wrk on core 1; took {seconds:.0f} s.", "",
             "## Targets (issue \"Performance II\")", "",
             "Streams are held to their same-bytes ceiling (the raw ASGI app sending the "
             "exact bytes and headers replay-server sent for that workload, chunked alike); "
             "non-streamed answers to the chat ceiling (a 1.2 KB chat body), as the issue "
             "states them.", "", *targets(t, index)]
    if t is not None:
        lines += ["", "## Throughput and latency", "",
                  "Two ceilings, both the raw ASGI app of bench/baseline.py measured in the "
                  "same run: the chat ceiling (fixed 1.2 KB chat body; the request bodies of "
                  "`chat`), and per workload a same-bytes ceiling, sent the same request bodies "
                  "at the same URL (`?w=WORKLOAD`, which replay-server ignores: checked) and "
                  "answering with the status, headers and body replay-server sent for the "
                  "first of them (checked byte for byte before the rounds). Each replay cell "
                  "is measured right after (or, every other round, before) its same-bytes "
                  "ceiling. `miss` answers 400 by design (its non-2xx count).", "",
                  *throughput_lines(t), "", "## Workers", "", *workers_lines(t)]
    if index:
        lines += ["", "## Index: load, memory, first answer", "",
                  "Synthetic runs of chat and completion records (bench/gen_run.py). Load: "
                  "`replay_server.index.loading.load` in process vs orjson parsing the same lines. "
                  "`index` s: wall time of `replay-server index` (a Python process start "
                  "included), run with a counter of the bytes it reads from the saved file "
                  "(every open of it, by any means, is counted too: an audit hook); its 2 "
                  "opens are the format probe, which reads the first line, and the one pass "
                  "over the file. Serve RSS: `serve`'s resident memory when it has answered "
                  "its first request; from the index most of it is the mapped index file "
                  "(anon: the process's own). The interpreter and its libraries take some "
                  "40-60 MB whatever the run (about the anon figure from the index), which "
                  "weighs on the ratios of small runs only. Measured "
                  f"{args.index_note}"
                  f"{' (taken from ' + str(args.index_from) + ')' if args.index_from else ''}"
                  ".", "", *index_lines(index)]
    return "\n".join(lines) + "\n"


def plot(t: Throughput, out: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    works = list(PATHS)
    x = range(len(works))
    for ax, key, title in ((left, lambda m: m.rps, "requests/s (c=64)"),
                           (right, lambda m: m.p99_ms, "p99 ms (c=64)")):
        ceiling = [t.median(SAME, w, 64, key) for w in works]
        replay = [t.median(REPLAY, w, 64, key) for w in works]
        ax.bar([i - 0.2 for i in x], ceiling, 0.4, color="#999", label="same-bytes ceiling")
        ax.bar([i + 0.2 for i in x], replay, 0.4, color="#3a7", label="replay-server")
        ax.axhline(t.median(CEILING, "chat", 64, key), color="#555", ls="--", lw=1,
                   label="chat ceiling")
        labels = list(works)
        for name in t.peer_names:
            for (system, work, c), _ in t.results.items():
                if system == name and c == 64:
                    labels.append(f"{name}\n{work}")
                    ax.bar(len(labels) - 1, t.median(system, work, 64, key), 0.4,
                           color="#c84")
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
        ax.set_title(title)
    left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 round of 3 s and a 20k index figure only (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--sizes", default="100000,1000000",
                        help="synthetic run sizes for the index figures (comma-separated)")
    parser.add_argument("--no-throughput", action="store_true",
                        help="the index figures only")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the report goes")
    parser.add_argument("--index-from", type=Path, metavar="JSON",
                        help="take the index figures from the index-figures.json an earlier "
                        "run wrote (they do not depend on the HTTP path) instead of measuring "
                        "them again; the report says when and at which commit they were")
    parser.add_argument("--workloads", help="only these workloads (comma-separated, of "
                        f"{', '.join(PATHS)}), no workers, peers nor index figures: their "
                        "throughput table is printed, and no report written (to iterate)")
    parser.add_argument("--concurrency", default="1,64",
                        help="with --workloads: the concurrency levels (comma-separated)")
    parser.add_argument("--mockllm-python", help="a Python with the `mockllm` package "
                        "(PyPI), to measure it beside replay-server")
    parser.add_argument("--llmock", default=shutil.which("llmock"),
                        help="aimock's `llmock` command (npm @copilotkit/aimock); found on "
                        "PATH by default")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.duration, args.sizes = 1, 3, "20000"
    if not shutil.which("wrk"):
        sys.exit("bench needs wrk: sudo apt-get install wrk")
    start = time.monotonic()
    args.load_before = os.getloadavg()[0]
    t = None
    if args.workloads:
        works = args.workloads.split(",")
        unknown = set(works) - set(PATHS)
        if unknown:
            sys.exit(f"unknown workloads: {', '.join(sorted(unknown))}")
        levels = tuple(int(c) for c in args.concurrency.split(","))
        t = throughput(ensure_run(20000, mixed=True), args.rounds, args.duration, [], works,
                       levels)
        print("\n".join(throughput_lines(t)))
        return
    if not args.no_throughput:
        run = ensure_run(20000, mixed=True)
        t = throughput(run, args.rounds, args.duration,
                       peers(run, args.mockllm_python, args.llmock))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.index_from:
        saved = orjson.loads(args.index_from.read_bytes())
        index, args.index_note = saved["figures"], saved["measured"]
    else:
        index = [index_figures(int(s)) for s in args.sizes.split(",") if s]
        args.index_note = f"{time.strftime('%Y-%m-%d %H:%M')} at commit {_commit()}"
        (args.out / "index-figures.json").write_bytes(orjson.dumps(
            {"measured": args.index_note, "figures": index}, option=orjson.OPT_INDENT_2))
    text = report(t, index, args, time.monotonic() - start)
    if t is not None and plot(t, args.out / "throughput.png"):
        text += ("\n![requests/s and p99 at c=64: each workload beside its same-bytes "
                 "ceiling](throughput.png)\n")
    (args.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
