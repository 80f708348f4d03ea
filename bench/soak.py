"""Soak: replay-server under steady load for a long while; does its memory stay flat?

    python bench/soak.py [--minutes 10] [--connections 64]

Runs `serve` on a synthetic run (bench/gen_run.py) and wrk at the given concurrency,
mixing chat, streamed chat, batched completions and misses (one body each in turn),
samples the server's resident memory every 10 s, and writes bench/results/soak.md:
RSS after warm-up and at the end (growth in %), requests, and errors (non-2xx other
than the misses' 422, and socket errors). On demand only: not part of the tests.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.run import HERE, RESULTS, ensure_run, pinned, workload_bodies  # noqa: E402

WARMUP_S = 30


def rss(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) * 1024  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to load it")
    parser.add_argument("--connections", type=int, default=64, help="wrk concurrency")
    args = parser.parse_args()
    run = ensure_run(20000)
    bodies = workload_bodies(run)
    proc = subprocess.Popen(pinned(0, [sys.executable, "-m", "replay_server", "serve", str(run),
                                       "--port", "18950", "--log-level", "error"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = "http://127.0.0.1:18950"
    while True:
        try:
            httpx.get(base + "/health", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    seconds = int(args.minutes * 60)
    paths = {"chat": "/v1/chat/completions", "chat-stream": "/v1/chat/completions",
             "completions-batch8": "/v1/completions", "miss": "/v1/chat/completions"}
    outputs: dict[str, str] = {}

    def load(work: str) -> None:
        argv = pinned(1, ["wrk", "-t1", f"-c{max(1, args.connections // 4)}", f"-d{seconds}s",
                          "-s", str(HERE / "post.lua"), base + paths[work], "--",
                          str(bodies[work])])
        outputs[work] = subprocess.run(argv, capture_output=True, text=True).stdout

    threads = [threading.Thread(target=load, args=(w,)) for w in paths]
    for t in threads:
        t.start()
    samples: list[tuple[float, int]] = []
    start = time.monotonic()
    while any(t.is_alive() for t in threads):
        samples.append((time.monotonic() - start, rss(proc.pid)))
        time.sleep(10)
    for t in threads:
        t.join()
    end_rss = rss(proc.pid)
    proc.terminate()
    proc.wait(30)
    warm = next((r for t, r in samples if t >= WARMUP_S), samples[-1][1])
    lines = ["# Soak report", "",
             f"`python bench/soak.py --minutes {args.minutes:g} --connections "
             f"{args.connections}` on {time.strftime('%Y-%m-%d')}: four wrk loads at once "
             "(chat, chat streamed, completions batch of 8, misses), 20k-record run.", "",
             f"- resident memory after {WARMUP_S} s warm-up: {warm / 1e6:.1f} MB; at the end: "
             f"{end_rss / 1e6:.1f} MB; growth {100 * (end_rss - warm) / warm:+.2f}%", ""]
    lines += ["| workload | requests | req/s | non-2xx | socket errors |",
              "| --- | --- | --- | --- | --- |"]
    for work, out in outputs.items():
        total = re.search(r"(\d+) requests in", out)
        rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
        bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
        sock = re.search(r"Socket errors: (.*)", out)
        lines.append(f"| {work} | {total.group(1) if total else '?'} | "
                     f"{rps.group(1) if rps else '?'} | {bad.group(1) if bad else 0} "
                     f"{'(all expected: misses answer 422)' if work == 'miss' else ''} | "
                     f"{sock.group(1) if sock else 'none'} |")
    lines += ["", "RSS samples (s, MB): " + ", ".join(f"{t:.0f}:{r / 1e6:.1f}"
                                                       for t, r in samples)]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
