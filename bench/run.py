"""The benchmark: replay-server beside a raw ASGI ceiling, measured in the same run.

Machines here are shared and noisy, so every figure is reported as a ratio against a
baseline measured in the same run, rounds are interleaved, and medians are kept.

    python bench/run.py [--quick] [--sizes 100000,1000000] [--rounds 3] [--duration 5]

Throughput: wrk (a compiled load generator) POSTs realistic bodies (about 1.5 KB of
messages, 1 KB answers) to servers on 127.0.0.1; each server runs on one core and wrk
on the other (taskset). Systems: the ceiling (bench/baseline.py, raw ASGI returning fixed
bytes on the same uvicorn settings) and replay-server (chat; chat streamed from a
non-streamed record, in small deltas; chat streamed from a recorded stream, its frames as
saved; completions with a batch of 8 prompts; /v1/responses, plain and streamed; misses),
at concurrency 1 and 64; peers (`mockllm`, aimock's `llmock`) when they are installed.

Index: synthetic runs of each size (bench/gen_run.py): load time vs orjson's raw parse
of the same file, resident memory vs the file's size, time until the server answers its
first request, from the files and from an index file (`replay-server index`).

Writes bench/results/report.md (and throughput.png when matplotlib is installed).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
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


def pinned(cpu: int, argv: list[str]) -> list[str]:
    return [TASKSET, "-c", str(cpu), *argv] if TASKSET and (os.cpu_count() or 1) > 1 else argv


# ---------------------------------------------------------------- servers and load


@dataclass
class Server:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0

    def start(self, port: int) -> None:
        self.port = port
        argv = [a.replace("{port}", str(port)) for a in self.argv]
        self.proc = subprocess.Popen(pinned(0, argv), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=ROOT)
        wait_until_up(f"http://127.0.0.1:{port}/health", self.proc)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
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
    bodies = {
        "chat": chat,
        "chat-stream": [{**b, "stream": True} for b in chat],
        "chat-stream-recorded": [{**r, "stream": True} for r in streamed],
        "responses": responses,
        "responses-stream": [{**r, "stream": True} for r in responses],
        "completions-batch8": [{"model": MODEL, "prompt": prompts[i:i + 8], "max_tokens": 256}
                               for i in range(0, len(prompts) - 7, 8)],
        "miss": [{**b, "messages": [*b["messages"][:-1],
                                    {**b["messages"][-1],
                                     "content": b["messages"][-1]["content"] + " "}]}
                 for b in chat],
    }
    out = {}
    for name, items in bodies.items():
        path = DATA / f"bodies-{name}.txt"
        path.write_bytes(b"\n".join(orjson.dumps(b) for b in items) + b"\n")
        out[name] = path
    return out


PATHS = {"chat": "/v1/chat/completions", "chat-stream": "/v1/chat/completions",
         "chat-stream-recorded": "/v1/chat/completions",
         "completions-batch8": "/v1/completions", "responses": "/v1/responses",
         "responses-stream": "/v1/responses", "miss": "/v1/chat/completions"}


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


def throughput(run: Path, rounds: int, seconds: int,
               peer_servers: list[tuple[Server, str]]) -> list[dict[str, Any]]:
    bodies = workload_bodies(run)
    base = Server("ceiling (raw ASGI)", [PY, "-m", "uvicorn", "bench.baseline:app", "--port",
                                          "{port}", "--no-access-log", "--log-level", "warning"])
    replay = Server("replay-server", [PY, "-m", "replay_server", "serve", str(run), "--port",
                                      "{port}", "--log-level", "error"])
    plan = [(base, "chat"), *[(replay, w) for w in PATHS], *peer_servers]
    servers = {id(s): s for s, _ in plan}
    for i, server in enumerate(servers.values()):
        server.start(18900 + i)
    # warm up: the first miss builds the prompt catalog
    httpx.post(f"http://127.0.0.1:{replay.port}{PATHS['miss']}",
               content=bodies["miss"].read_bytes().splitlines()[0], timeout=600)
    results: dict[tuple[str, str, int], list[Measure]] = {}
    try:
        for r in range(rounds):
            for server, work in plan:
                for c in (1, 64):
                    url = f"http://127.0.0.1:{server.port}{PATHS[work]}"
                    print(f"round {r + 1}/{rounds}: {server.name} {work} c={c}", flush=True)
                    results.setdefault((server.name, work, c), []).append(
                        wrk(url, bodies[work], c, seconds))
    finally:
        for server in servers.values():
            server.stop()
    rows = []
    for (name, work, c), runs in results.items():
        ceiling = results[(base.name, "chat", c)]
        row = {"system": name, "workload": work, "c": c,
               "rps": statistics.median(m.rps for m in runs),
               "p50_ms": statistics.median(m.p50_ms for m in runs),
               "p99_ms": statistics.median(m.p99_ms for m in runs),
               "non_2xx": sum(m.non_2xx for m in runs)}
        row["rps_ratio"] = row["rps"] / statistics.median(m.rps for m in ceiling)
        row["p99_ratio"] = row["p99_ms"] / statistics.median(m.p99_ms for m in ceiling)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- index figures

_PARSE = "import orjson,sys,time\nt=time.perf_counter()\nn=0\n" \
         "with open(sys.argv[1],'rb') as f:\n    for line in f: orjson.loads(line); n+=1\n" \
         "print(n, time.perf_counter()-t)"
_LOAD = "import sys,time,gc\nfrom replay_server.loader import load\n" \
        "base=int(open('/proc/self/statm').read().split()[1])*4096\n" \
        "t=time.perf_counter()\nl=load([sys.argv[1]],progress=False)\n" \
        "dt=time.perf_counter()-t\ngc.collect()\n" \
        "rss=int(open('/proc/self/statm').read().split()[1])*4096\nprint(dt, rss, base)"


def _rss(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) * 1024  # type: ignore
            for k in ("VmRSS", "RssAnon", "RssFile")}


def first_answer(target: Path, run: Path) -> tuple[float, dict[str, int]]:
    """Seconds from starting `serve` until it answers a saved prompt, and its memory."""
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
        return elapsed, _rss(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)


def index_figures(size: int) -> dict[str, Any]:
    run = ensure_run(size)
    file_bytes = run.stat().st_size
    n, parse_s = subprocess.run([PY, "-c", _PARSE, str(run)], capture_output=True, text=True,
                                check=True).stdout.split()
    load_s, rss, base = map(float, subprocess.run([PY, "-c", _LOAD, str(run)], cwd=ROOT,
                                                  capture_output=True, text=True,
                                                  check=True).stdout.split())
    idx = DATA / f"run{size}.idx"
    start = time.monotonic()
    subprocess.run([PY, "-m", "replay_server", "index", str(run), "-o", str(idx)], cwd=ROOT,
                   check=True, capture_output=True)
    build_s = time.monotonic() - start
    files_first, files_rss = first_answer(run, run)
    idx_first, idx_rss = first_answer(idx, run)
    return {"records": int(n), "file_mb": file_bytes / 1e6, "parse_s": float(parse_s),
            "load_s": load_s, "load_ratio": float(parse_s) / load_s,
            "rss_ratio": (rss - base) / file_bytes, "index_build_s": build_s,
            "index_mb": idx.stat().st_size / 1e6,
            "first_answer_files_s": files_first, "first_answer_index_s": idx_first,
            "serve_files_rss_ratio": files_rss["VmRSS"] / file_bytes,
            "serve_index_rss_ratio": idx_rss["VmRSS"] / file_bytes,
            "serve_index_anon_ratio": idx_rss["RssAnon"] / file_bytes}


# ---------------------------------------------------------------- report


def report(rows: list[dict[str, Any]], index: list[dict[str, Any]], args: argparse.Namespace,
           seconds: float) -> str:
    lines = ["# Benchmark report", "",
             f"Generated by `make bench` (`python bench/run.py`) on {time.strftime('%Y-%m-%d')}, "
             f"{os.cpu_count()} cores; {args.rounds} interleaved rounds of {args.duration} s "
             f"per cell, medians; server on core 0, wrk on core 1; took {seconds:.0f} s.", "",
             "## Throughput and latency (ratios against the raw ASGI ceiling, same run)", "",
             "| system | workload | c | req/s | x ceiling | p50 ms | p99 ms | p99 x ceiling |"
             " non-2xx |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['system']} | {r['workload']} | {r['c']} | {r['rps']:.0f} | "
                     f"{r['rps_ratio']:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                     f"{r['p99_ratio']:.2f} | {r['non_2xx']} |")
    if any(r["rps"] == 0 for r in rows):
        lines += ["", "A rate of 0 means no request completed within wrk's 2 s timeout. "
                  "mockllm 0.0.8 re-reads its whole responses file on every request (it "
                  "compares the file's float mtime with a truncated int), which takes about "
                  "1.7 s with these 2,000 answers."]
    if index:
        lines += ["", "## Index: load, memory, first answer", "",
                  "| records | file MB | orjson parse s | load s | load rate x parse | "
                  "RSS x file (loaded) | index build s | index MB | first answer: files s | "
                  "first answer: index s | serve RSS x file: files / index (anon) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for i in index:
            lines.append(
                f"| {i['records']} | {i['file_mb']:.0f} | {i['parse_s']:.2f} | "
                f"{i['load_s']:.2f} | {i['load_ratio']:.2f} | {i['rss_ratio']:.2f} | "
                f"{i['index_build_s']:.1f} | {i['index_mb']:.0f} | "
                f"{i['first_answer_files_s']:.1f} | {i['first_answer_index_s']:.2f} | "
                f"{i['serve_files_rss_ratio']:.2f} / {i['serve_index_rss_ratio']:.2f} "
                f"({i['serve_index_anon_ratio']:.2f}) |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], out: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, title in ((left, "rps", "requests/s (c=64)"), (right, "p99_ms", "p99 ms (c=64)")):
        picked = [r for r in rows if r["c"] == 64]
        labels = [f"{r['system']}\n{r['workload']}" for r in picked]
        ax.bar(range(len(picked)), [r[key] for r in picked],
               color=["#888" if "ceiling" in r["system"] else "#3a7" for r in picked])
        ax.set_xticks(range(len(picked)), labels, rotation=45, ha="right", fontsize=8)
        ax.set_title(title)
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
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the report goes")
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
    run = ensure_run(20000, mixed=True)
    rows = throughput(run, args.rounds, args.duration,
                      peers(run, args.mockllm_python, args.llmock))
    index = [index_figures(int(s)) for s in args.sizes.split(",") if s]
    args.out.mkdir(parents=True, exist_ok=True)
    text = report(rows, index, args, time.monotonic() - start)
    if plot(rows, args.out / "throughput.png"):
        text += "\n![throughput and p99 latency at c=64](throughput.png)\n"
    (args.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
