"""Scaling out on this machine: `serve --state` replicas behind HAProxy, sharing one
redis-server, beside one replica alone, measured in the same run.

    python bench/scale.py [--rounds 3] [--duration 5] [--connections 64]

Setups, each started afresh in every round (rounds interleaved, medians of the per-round
ratios kept, as bench/run.py does):
- `alone`: one `serve RUN.idx`, no state, no balancer: the baseline;
- `state`: one `serve RUN.idx --state redis://...`, no balancer: what the shared state costs;
- `balanced xN` (N = 1, 2, 3): N `serve RUN.idx --state redis://...` replicas behind HAProxy
  (docker/haproxy.cfg, started as the tests start it, tests/parts/haproxy.py: a line
  logged per request, as compose's `scale` profile has it).
The real parts are the tests' own (tests/parts/): one way to start each.
Workloads (wrk, c connections): `chat`, the greedy case (every request a saved prompt with
one generation: no cursor, the state only counts); `repeats`, lm-eval's `repeats` case (n=1
calls for prompts that saved 100 different samples: each call claims the next sample from
the shared cursor, exactly once across every replica); the state is reset (`POST
/replay/reset`) before each measure, so no prompt runs out of samples during one.

The machine's limit, said in the report: every process here (wrk, HAProxy, redis-server and
the replicas) shares its cores, so a second or third replica cannot add throughput on a
2-core machine; what the figures show is what the balancer and the shared state cost, and
that replicas sharing one state lose nothing to each other. On machines of their own, the
replicas scale until redis-server (one core) or the balancer is the limit.

Writes bench/results/scale.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # (run as a script: the bench's and the tests' modules)

from bench.run import (  # noqa: E402
    DATA,
    PY,
    RESULTS,
    Measure,
    Server,
    ensure_index,
    ensure_run,
    workload_bodies,
    wrk,
)
from tests.parts.haproxy import balancer  # noqa: E402
from tests.parts.redis_server import running as redis_server  # noqa: E402
from tests.support import free_port  # noqa: E402

REPEATS_PROMPTS = 200
REPEATS_SAMPLES = 100
CHAT = "/v1/chat/completions"


def repeats_run(source: Path) -> tuple[Path, Path]:
    """A run of REPEATS_PROMPTS chat prompts, each saved by one instance with
    REPEATS_SAMPLES different samples (lm-eval's `repeats`), compiled to an index; and the
    n=1 request bodies that ask for them, prompt after prompt."""
    path = DATA / f"repeats{REPEATS_PROMPTS}x{REPEATS_SAMPLES}.jsonl"
    bodies = DATA / "bodies-repeats.txt"
    if not path.exists() or not bodies.exists():
        records = []
        with source.open("rb") as f:
            for line in f:
                record = orjson.loads(line)
                if record["endpoint"] == CHAT and "stream" not in record:
                    records.append(record)
                if len(records) == REPEATS_PROMPTS:
                    break
        with path.open("wb") as out:
            for record in records:
                for j in range(REPEATS_SAMPLES):
                    response = orjson.loads(orjson.dumps(record["response"]))
                    response["choices"][0]["message"]["content"] += f" (sample {j})"
                    out.write(orjson.dumps({**record, "response": response}) + b"\n")
        bodies.write_bytes(b"\n".join(orjson.dumps(r["request"]) for r in records) + b"\n")
    index, cursors = ensure_index(path)
    assert cursors == REPEATS_PROMPTS, f"{path}: {cursors} prompts need the cursor"
    return index, bodies


def serve(index: Path, state: str | None) -> Server:
    argv = [PY, "-m", "replay_server", "serve", str(index), "--port", "{port}",
            "--log-level", "error"]
    return Server("replica", argv + (["--state", state] if state else []), cpu=None)


@contextmanager
def setup(name: str, index: Path, state: str, tmp: Path) -> Iterator[str]:
    """The setup `name` started; the base URL a harness would be pointed at."""
    with ExitStack() as stack:
        if name == "alone":
            servers = [serve(index, None)]
        else:
            count = int(name.rpartition("x")[2]) if name.startswith("balanced") else 1
            servers = [serve(index, state) for _ in range(count)]
        for server in servers:
            server.start(free_port())
            stack.callback(server.stop)
        if name.startswith("balanced"):
            front = stack.enter_context(balancer([s.port for s in servers], tmp))
            yield front.url.removesuffix("/v1")
        else:
            yield f"http://127.0.0.1:{servers[0].port}"


SETUPS = ["alone", "state", "balanced x1", "balanced x2", "balanced x3"]


def measure(args: argparse.Namespace) -> dict[tuple[str, str], list[Measure]]:
    chat_run = ensure_run(20000, mixed=True)
    chat_index, _ = ensure_index(chat_run)
    chat_bodies = workload_bodies(chat_run)["chat"]
    repeats_index, repeats_bodies = repeats_run(ensure_run(20000))
    work = {"chat": (chat_index, chat_bodies), "repeats": (repeats_index, repeats_bodies)}
    results: dict[tuple[str, str], list[Measure]] = {}
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as store:
        state = store.url
        for round_ in range(args.rounds):
            for name in SETUPS:
                for workload, (index, bodies) in work.items():
                    with setup(name, index, state, Path(tmp)) as base:
                        httpx.post(base + "/replay/reset", timeout=30).raise_for_status()
                        found = wrk(base + CHAT, bodies, args.connections, args.duration)
                    results.setdefault((name, workload), []).append(found)
                    print(f"round {round_ + 1} {name:12} {workload:8} {found.rps:8.0f} req/s "
                          f"p99 {found.p99_ms:.1f} ms non-2xx {found.non_2xx}", flush=True)
    return results


def report(results: dict[tuple[str, str], list[Measure]], args: argparse.Namespace,
           took: float) -> str:
    lines = ["# Scaling out: replicas behind HAProxy sharing one redis-server", "",
             f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} cores, "
             f"load {os.getloadavg()[0]:.1f} at the end; {args.rounds} interleaved rounds of "
             f"{args.duration} s, wrk at c={args.connections}; {took:.0f} s in all. Medians; "
             "the ratio is each round's requests/s over the same round's `alone`.", "",
             "| setup | workload | requests/s | x alone | p99 ms | non-2xx |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for workload in ("chat", "repeats"):
        base = results[("alone", workload)]
        for name in SETUPS:
            found = results[(name, workload)]
            ratio = statistics.median(m.rps / b.rps for m, b in zip(found, base, strict=True))
            lines.append(f"| {name} | {workload} | {statistics.median(m.rps for m in found):.0f}"
                         f" | {ratio:.2f} | {statistics.median(m.p99_ms for m in found):.1f} | "
                         f"{sum(m.non_2xx for m in found)} |")
    lines += ["", "This machine's limit: every process (wrk, HAProxy, redis-server, the "
              "replicas) shares its cores, so more replicas cannot add throughput here; the "
              "figures are what the balancer and the shared state cost, and show that "
              "replicas sharing one state lose nothing to each other. `repeats` claims each "
              "sample from the shared cursor (a few round trips to redis-server a request), "
              "`chat` only counts in it.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per setup")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=64, help="wrk's connections")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where scale.md goes")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench needs wrk: sudo apt-get install wrk")
    start = time.monotonic()
    results = measure(args)
    text = report(results, args, time.monotonic() - start)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
