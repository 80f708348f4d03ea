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
Peers (bench/peers.py: WireMock, Mockoon's CLI, aimock, mockllm), those installed, loaded
with the same saved answers; its docstring says how to install them.

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
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (run as a script)
from bench import peers  # noqa: E402
from replay_server.index.file import VERSION  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# the generated runs (a 1M-record run is some 3 GB): BENCH_DATA puts them elsewhere
DATA = Path(os.environ.get("BENCH_DATA", HERE / ".data"))
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

    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

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


def ensure_index(run: Path) -> tuple[Path, int]:
    """The run compiled to an index file, and how many of its prompts need the repeats
    cursor (several workers refuse a run that does)."""
    idx = run.with_suffix(".idx")
    if not idx.exists() or idx.stat().st_mtime < run.stat().st_mtime or \
            _meta(idx, "version") != str(VERSION):  # (one of an older replay-server)
        print(f"indexing {run}...", flush=True)
        subprocess.run([PY, "-m", "replay_server", "index", str(run), "-o", str(idx)],
                       cwd=ROOT, check=True, capture_output=True)
    cursors = _meta(idx, "cursor_prompts")
    return idx, int(cursors) if cursors is not None else -1


def _meta(idx: Path, name: str) -> str | None:
    """A `meta` value of an index file."""
    db = sqlite3.connect(f"file:{idx}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
    finally:
        db.close()
    return row[0] if row else None


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
               peer_list: list[peers.Peer], works: list[str] | None = None,
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
    peer_servers = [(peer, Server(peer.name, peer.argv)) for peer in peer_list]
    servers = [replay, base, *workers.values(), *(server for _, server in peer_servers)]
    results: dict[tuple[str, str, int], list[Measure]] = {}
    payloads: dict[str, dict[str, Any]] = {}
    ceiling_bytes = 0

    def measure(server: Server, system: str, work: str, c: int, query: str = "",
                own: dict[str, Path] | None = None) -> None:
        print(f"  {system} {work} c={c}", flush=True)
        results.setdefault((system, work, c), []).append(
            wrk(server.url(PATHS[work] + query), (own or bodies)[work], c, seconds))

    try:
        replay.start(18900)
        # the first miss builds the prompt catalog; the capture makes it
        payloads = capture(replay, bodies)
        payload_file.write_bytes(orjson.dumps(payloads))
        for peer in peer_list:  # their files, from the exchanges replay-server answers
            peer.prepare(replay.url(""), bodies)
        for i, server in enumerate(servers[1:], start=1):
            server.start(18900 + i)
        ceiling_bytes = check_ceiling(base, bodies, payloads)
        for peer, server in peer_servers:  # right answers, then one untimed run (a JIT warms)
            peers.check(peer, server.url(""))
            for work in peer.works:
                wrk(server.url(PATHS[work]), peer.bodies[work], 64, seconds)
                peers.settle(server.pid())
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
                for peer, server in peer_servers:
                    for work in peer.works:
                        measure(server, peer.name, work, c, own=peer.bodies)
                        peers.settle(server.pid())
    finally:
        for server in servers:
            server.stop()
    return Throughput(results, payloads, ceiling_bytes, cursor_prompts,
                      [peer.name for peer in peer_list])


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
import resource
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
sys.exit(code)
'''
# `replay-server ARGS`, then its peak resident memory (bytes) on the last line of stdout
_PEAK = r'''
import resource, sys
from replay_server.cli import main
code = 0
try:
    main(sys.argv[1:], prog_name="replay-server")
except SystemExit as e:
    code = e.code
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
sys.exit(code)
'''


def _status(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) * 1024  # type: ignore
            for k in ("VmRSS", "RssAnon", "RssFile")}


def _free_port() -> int:
    """A port free on 127.0.0.1 now (the machine is shared: another bench may hold any
    fixed one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def first_answer(target: Path, run: Path, cache: Path) -> tuple[float, dict[str, int]]:
    """Seconds from starting `serve` until it answers a saved prompt, and its memory then;
    with `cache` as replay-server's cache (saved files: the index cache, index/cache.py)."""
    with run.open("rb") as f:
        request = orjson.loads(f.readline())["request"]
    port = _free_port()
    start = time.monotonic()
    proc = subprocess.Popen([PY, "-m", "replay_server", "serve", str(target), "--port", str(port),
                             "--log-level", "error"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=ROOT,
                            env={**os.environ, "REPLAY_SERVER_CACHE": str(cache)})
    try:
        path = "/v1/chat/completions" if "messages" in request else "/v1/completions"
        while True:
            try:
                r = httpx.post(f"http://127.0.0.1:{port}{path}", json=request, timeout=5)
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
    *_, counted, peak = built.stdout.strip().splitlines()
    [reads] = orjson.loads(counted)
    cache = DATA / "cache"  # the bench's own, empty: the first start builds, the next opens
    shutil.rmtree(cache, ignore_errors=True)
    try:
        files_first, files_mem = first_answer(run, run, cache)
        again_first, again_mem = first_answer(run, run, cache)  # a run served before
        idx_first, idx_mem = first_answer(idx, run, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"records": int(n), "file_bytes": file_bytes, "parse_s": float(parse_s),
            "load_s": load_s, "load_ratio": float(parse_s) / load_s,
            "rss_ratio": (rss - base) / file_bytes, "index_build_s": build_s,
            "index_read_ratio": reads["bytes"] / file_bytes, "index_opens": reads["opens"],
            "index_counted_opens": reads["counted_opens"],
            "index_bytes": idx.stat().st_size, "index_peak_rss": int(peak),
            "first_answer_files_s": files_first, "first_answer_index_s": idx_first,
            "first_answer_again_s": again_first, "serve_again_rss": again_mem["VmRSS"],
            "serve_files_rss": files_mem["VmRSS"], "serve_index_rss": idx_mem["VmRSS"],
            "serve_index_anon": idx_mem["RssAnon"]}


def short_figures(size: int) -> dict[str, Any]:
    """A run of `size` short exchanges (bench/gen_run.py --short, some 560 bytes each),
    generated on the fly and deleted after: `index` time and peak memory, the index's
    size, the first answer from it and `serve`'s memory then."""
    print(f"short exchanges: {size} records", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-short-", dir=DATA) as folder:
        run, idx = Path(folder) / "short.jsonl", Path(folder) / "short.idx"
        subprocess.run([PY, str(HERE / "gen_run.py"), str(run), "--records", str(size),
                        "--short"], check=True, cwd=ROOT)
        start = time.monotonic()
        built = subprocess.run([PY, "-c", _PEAK, "index", str(run), "-o", str(idx)],
                               cwd=ROOT, check=True, capture_output=True, text=True)
        build_s = time.monotonic() - start
        first_s, mem = first_answer(idx, run, Path(folder) / "cache")
        return {"records": size, "file_bytes": run.stat().st_size, "index_build_s": build_s,
                "index_peak_rss": int(built.stdout.split()[-1]),
                "index_bytes": idx.stat().st_size, "first_answer_index_s": first_s,
                "serve_index_rss": mem["VmRSS"], "serve_index_anon": mem["RssAnon"]}


# the figures of the short runs, compared from the smallest to the largest run
SHORT = (("file_bytes", "file MB", 1e6), ("index_build_s", "`index` s", 1),
         ("index_peak_rss", "`index` peak RSS MB", 1e6), ("index_bytes", "index MB", 1e6),
         ("first_answer_index_s", "first answer: index s", 1),
         ("serve_index_rss", "serve RSS MB: index", 1e6),
         ("serve_index_anon", "serve RSS MB: index, anon", 1e6))


def short_lines(short: list[dict[str, Any]]) -> list[str]:
    """The short runs side by side, and each figure's ratio of the largest to the
    smallest run beside the ratio of their records (a figure that grows no faster than
    the records has a ratio no larger)."""
    lines = ["| records | " + " | ".join(name for _, name, _ in SHORT) + " |",
             "| --- |" + " --- |" * len(SHORT)]
    for s in short:
        lines.append(f"| {s['records']} | " + " | ".join(
            f"{s[key] / unit:.2f}" if unit == 1 else f"{s[key] / unit:.0f}"
            for key, _, unit in SHORT) + " |")
    if len(short) > 1:
        low, high = short[0], short[-1]
        lines.append(f"| ratio {high['records'] / low['records']:.0f}x records | " + " | ".join(
            f"{high[key] / low[key]:.2f}" for key, _, _ in SHORT) + " |")
    return lines


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


def targets(t: Throughput | None, index: list[dict[str, Any]],
            short: list[dict[str, Any]] | None = None) -> list[str]:
    """The issue's targets (Performance III), item by item: target, measured (median), the
    rounds' spread, met."""
    rows: list[tuple[str, str, str, str]] = []  # target, median, rounds' spread, met
    big = [i for i in index if i["records"] >= ONE_M]
    # 1. a run served before starts at once
    if big and "first_answer_again_s" in big[-1]:  # (figures of an earlier bench lack it)
        i = big[-1]
        rows.append((f"1. a second start from files, {i['records']} records: first answer "
                     "<= 2 s", f"{i['first_answer_again_s']:.2f} s", "—",
                     _met(i["first_answer_again_s"], 2, at_least=False)))
    else:
        rows.append(("1. a second start from files, 1M records: first answer <= 2 s",
                     "not in these figures", "—", "not measured"))
    # 2. a run never served before
    if big:
        i = big[-1]
        rows.append((f"2. first answer from files never served, {i['records']} records: "
                     "<= 10 s", f"{i['first_answer_files_s']:.1f} s", "—",
                     _met(i["first_answer_files_s"], 10, at_least=False)))
        rows.append((f"2. `index`, {i['records']} records: <= 30 s",
                     f"{i['index_build_s']:.1f} s", "—",
                     _met(i["index_build_s"], 30, at_least=False)))
    else:
        rows.append(("2. first answer from files (<= 10 s) and `index` (<= 30 s), 1M records",
                     "sizes run: " + (", ".join(str(i["records"]) for i in index) or "none"),
                     "—", "not measured"))
    for i in index:
        rows.append((f"2. load, {i['records']} records: rate >= 0.5x orjson's parse of the "
                     "file", _num(i["load_ratio"]), "—", _met(i["load_ratio"], 0.5)))
    for i in index:
        value = i["serve_files_rss"] / i["file_bytes"]
        rows.append((f"2. serve from files, {i['records']} records: RSS <= 0.5x the file",
                     _num(value), "—", _met(value, 0.5, at_least=False)))
    for i in index:
        once = i["index_opens"] == i["index_counted_opens"] and i["index_read_ratio"] < 1.01
        rows.append((f"2. `index`, {i['records']} records: reads each saved file once",
                     f"{i['index_read_ratio']:.4f}x the file's bytes ({i['index_opens']} "
                     "opens)", "—", "yes" if once else "**no**"))
    # 3. ten million records: every figure grows no faster than the records
    if short and len(short) > 1:
        low, high = short[0], short[-1]
        times = high["records"] / low["records"]
        for key, name, _ in SHORT[1:]:
            if key == "index_bytes":  # an index grows with its file's bytes, numbers longer
                value = (high[key] / high["file_bytes"]) / (low[key] / low["file_bytes"])
                rows.append((f"3. short exchanges, index bytes per saved byte: "
                             f"{high['records']} vs {low['records']} records <= 1.01x",
                             f"{value:.3f}x ({high[key] / low[key]:.2f}x the bytes)", "—",
                             _met(value, 1.01, at_least=False)))
                continue
            value = high[key] / low[key]
            rows.append((f"3. short exchanges, {name}: {high['records']} vs {low['records']} "
                         f"records grows <= {times:.0f}x", f"{value:.2f}x", "—",
                         _met(value, times, at_least=False)))
    else:
        rows.append(("3. short exchanges at 1M and 10M records", "not run", "—",
                     "not measured"))
    if t is None:
        rows.append(("4.-6. streams, a request's cost, peers", "no throughput run", "—",
                     "not measured"))
    else:
        # 4. streams near the cost of their bytes (c=64)
        for work, limit in (("chat-stream", 0.5), ("responses-stream", 0.5),
                            ("chat-stream-recorded", 0.6), ("completions-batch8", 0.5)):
            num, den = (REPLAY, work, 64), (SAME, work, 64)
            value = t.ratio(num, den)
            rows.append((f"4. {work}, c=64: req/s >= {limit}x its same-bytes ceiling "
                         f"({t.payloads[work]['bytes'] / 1e3:.0f} KB)", _num(value),
                         t.spread(num, den), _met(value, limit)))
        num, den = (REPLAY, "miss", 64), (REPLAY, "chat", 64)
        value = t.ratio(num, den)
        rows.append(("4. misses, c=64: req/s >= 0.4x chat hits", _num(value),
                     t.spread(num, den), _met(value, 0.4)))
        # 5. a request's own cost
        num, den = (REPLAY, "chat", 64), (CEILING, "chat", 64)
        value = t.ratio(num, den)
        rows.append(("5. chat, c=64: req/s >= 0.55x the chat ceiling", _num(value),
                     t.spread(num, den), _met(value, 0.55)))
        if t.cursor_prompts == 0:
            num, den = (WORKERS[2], "chat", 64), (WORKERS[1], "chat", 64)
            value = t.ratio(num, den)
            rows.append(("workers: chat c=64 from the index, `--workers 2` vs 1 (no target; "
                         "the client shares a core with a worker: see Workers)",
                         f"{_num(value)} ({t.median(*num):.0f} vs {t.median(*den):.0f} req/s)",
                         t.spread(num, den), "reported"))
        # 6. the peers users would pick instead
        rows.append(("6. peers side by side (throughput table)", ", ".join(t.peer_names)
                     or "none installed (see Peers)", "—",
                     "reported" if t.peer_names else "not measured"))
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
        lines += ["", "A rate of 0 means no request completed within wrk's 2 s timeout."]
    return lines


def peer_lines(args: argparse.Namespace) -> list[str]:
    lines = ["Peers (bench/peers.py; docs/performance.md says how each is set up): each had "
             "to answer a few of its requests with the saved answer's text, then ran once "
             "untimed (a JIT warms) before the rounds, and after each of its runs the bench "
             "waited until it was idle (it may go on answering requests wrk gave up on). "
             "WireMock and Mockoon play back the exchanges recorded from replay-server (a "
             "stream as its bytes, whole); aimock keys on the last user message and builds "
             "its own answers; mockllm re-reads its whole responses file on every request, "
             f"so it has the first {peers.MOCKLLM_ANSWERS} answers, beside replay-server "
             "serving a run of those."]
    if args.peers_missing:
        lines += ["", "Not measured, not installed (bench/peers.py says how to install them; "
                  f"each flag names a peer's command): {', '.join(args.peers_missing)}."]
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
             "serve RSS MB (x file): index, anon | `index` peak RSS MB (x file) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
             "--- |"]
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
            f"{i['serve_index_anon'] / 1e6:.0f} ({i['serve_index_anon'] / size:.2f}) | "
            + (f"{i['index_peak_rss'] / 1e6:.0f} ({i['index_peak_rss'] / size:.2f}) |"
               if "index_peak_rss" in i else "- |"))
    return lines


def report(t: Throughput | None, index: list[dict[str, Any]], args: argparse.Namespace,
           seconds: float, short: list[dict[str, Any]] | None = None) -> str:
    lines = ["# Benchmark report", "",
             f"Generated by `make bench` (`python bench/run.py{' --quick' if args.quick else ''}"
             f"`) on {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores (1-minute load "
             f"average {args.load_before:.2f} before, {os.getloadavg()[0]:.2f} after: other "
             f"users' work shows there); {args.rounds} interleaved round(s) of {args.duration} s "
             f"per cell, medians of the per-round ratios; servers on core 0 (the workers "
             f"aside), wrk on core 1; took {seconds:.0f} s.", "",
             "## Targets (issue \"Performance III\")", "",
             "Numbered by the issue's items. Streams and batches are held to their "
             "same-bytes ceiling (the raw ASGI app sending the exact bytes and headers "
             "replay-server sent for that workload, chunked alike); non-streamed chat to the "
             "chat ceiling (a 1.2 KB chat body); figures of one run, never timing asserts. "
             "Where a target is missed, docs/performance.md says where the time goes.", "",
             *targets(t, index, short)]
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
                  *throughput_lines(t), "", *peer_lines(args), "", "## Workers", "",
                  *workers_lines(t)]
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
    if short:
        lines += ["", "## Ten million records: short exchanges", "",
                  "Runs of short chat exchanges (`bench/gen_run.py --short`, some 560 bytes "
                  "each), generated for the measure and deleted after: `index` (wall time, a "
                  "Python start included, and its peak resident memory), the index file, "
                  "the first answer of `serve` from it and `serve`'s memory then. The last "
                  "row divides the largest run's figures by the smallest's: a figure that "
                  "grows no faster than the records has a ratio no larger than theirs. "
                  f"Measured {args.index_note}.", "", *short_lines(short)]
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
    parser.add_argument("--short-sizes", default="1000000,10000000",
                        help="sizes of the runs of short exchanges, generated for the measure "
                        "and deleted after (comma-separated; empty: none)")
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
    parser.add_argument("--wiremock", default=peers.installed("wiremock"),
                        help="WireMock: npm `wiremock`'s command or its standalone jar (run "
                        f"with java); found on PATH or in {peers.CACHE} by default")
    parser.add_argument("--mockoon", default=peers.installed("mockoon-cli"),
                        help="Mockoon's `mockoon-cli` command (npm @mockoon/cli); found on "
                        f"PATH or in {peers.CACHE} by default")
    parser.add_argument("--llmock", default=peers.installed("llmock"),
                        help="aimock's `llmock` command (npm @copilotkit/aimock); found on "
                        f"PATH or in {peers.CACHE} by default")
    parser.add_argument("--mockllm-python", default=peers.mockllm_python(),
                        help="a Python with the `mockllm` package (PyPI), to measure it "
                        f"beside replay-server; {peers.CACHE}/mockllm by default")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.duration, args.sizes, args.short_sizes = 1, 3, "20000", "20000,200000"
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
        t = throughput(run, args.rounds, args.duration, peers.all_installed(
            run, DATA, args.wiremock, args.mockoon, args.llmock, args.mockllm_python))
    args.peers_missing = [f"--{flag}" for flag in ("wiremock", "mockoon", "llmock",
                                                   "mockllm-python")
                          if not getattr(args, flag.replace("-", "_"))]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.index_from:
        saved = orjson.loads(args.index_from.read_bytes())
        index, args.index_note = saved["figures"], saved["measured"]
        short = saved.get("short", [])
    else:
        index = [index_figures(int(s)) for s in args.sizes.split(",") if s]
        DATA.mkdir(exist_ok=True)
        short = [short_figures(int(s)) for s in args.short_sizes.split(",") if s]
        args.index_note = f"{time.strftime('%Y-%m-%d %H:%M')} at commit {_commit()}"
        (args.out / "index-figures.json").write_bytes(orjson.dumps(
            {"measured": args.index_note, "figures": index, "short": short},
            option=orjson.OPT_INDENT_2))
    text = report(t, index, args, time.monotonic() - start, short)
    if t is not None and plot(t, args.out / "throughput.png"):
        text += ("\n![requests/s and p99 at c=64: each workload beside its same-bytes "
                 "ceiling](throughput.png)\n")
    (args.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
