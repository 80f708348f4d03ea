"""A request's own cost: `Replayer.handle` per hit, against the work no replay can skip.

    python bench/handle.py [--records 2000] [--rounds 5] [--seconds 0.3] [--profile FAMILY]

In process, no HTTP: a synthetic run of each family (chat, completions, Responses,
Anthropic's Messages, Google's Gemini; bench/gen_run.py's records and this file's), served
from the run loaded in memory (`index.loading.load`) and from its index file
(`replay-server index`, `index.file.StoredIndex`), its saved requests sent back as they
were saved (every request a hit, one whole saved exchange each).

The irreducible work of a hit, chosen here: orjson parsing the request body and SHA-256
of its key (`keys.digest` of the request's canonical keyed prompt, made beforehand). No
replay can skip reading the request, nor hashing what it is keyed by; everything else
(type checks, the keyed prompt's normal form, its canonical encoding, the lookup, the
samples rules, the counts) is the replay's own cost, and what this measures.

Rounds are interleaved (the irreducible loop, then each way of serving it, per family,
per round); each cell keeps the fastest pass of each 50 requests (a shared machine
interrupts the others), and the medians of the per-round figures are printed:
microseconds per request, and that as a multiple of the irreducible work measured in the
same round.
`--profile FAMILY` runs cProfile over `handle` for that family instead (from the index
file with `--from-file`).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import gen_run  # noqa: E402

from replay_server.index.file import StoredIndex  # noqa: E402
from replay_server.index.index import Index  # noqa: E402
from replay_server.index.loading import load  # noqa: E402
from replay_server.index.samples import Rules  # noqa: E402
from replay_server.replay.replayer import Replayer  # noqa: E402
from replay_server.wire import keys  # noqa: E402
from replay_server.wire.families import family_of  # noqa: E402

MODEL = gen_run.MODEL
GEMINI = "/v1beta/models/{model}:generateContent"


def messages_record(i: int, rng: random.Random) -> dict[str, Any]:
    answer = gen_run.text(rng, 1000) + f" The answer is {i}."
    request = {"model": MODEL, "max_tokens": 512, "temperature": 0.0,
               "system": "You are a careful assistant. " + gen_run.text(rng, 300),
               "messages": [{"role": "user",
                             "content": f"Question {i}: " + gen_run.text(rng, 1100)}]}
    return {"replay_record": 1, "endpoint": "/v1/messages", "model": MODEL, "request": request,
            "response": {"id": f"msg_{i:024x}", "type": "message", "role": "assistant",
                         "model": MODEL, "content": [{"type": "text", "text": answer}],
                         "stop_reason": "end_turn", "stop_sequence": None,
                         "usage": {"input_tokens": 300, "output_tokens": 220}},
            "source": {"harness": "bench", "instance": f"doc-{i}"}}


def gemini_record(i: int, rng: random.Random) -> dict[str, Any]:
    answer = gen_run.text(rng, 1000) + f" The answer is {i}."
    request = {"systemInstruction": {"parts": [{"text": "You are a careful assistant. "
                                                + gen_run.text(rng, 300)}]},
               "contents": [{"role": "user", "parts": [
                   {"text": f"Question {i}: " + gen_run.text(rng, 1100)}]}],
               "generationConfig": {"temperature": 0.0, "maxOutputTokens": 512}}
    return {"replay_record": 1, "endpoint": GEMINI, "model": MODEL, "request": request,
            "response": {"candidates": [{"content": {"parts": [{"text": answer}],
                                                     "role": "model"},
                                         "finishReason": "STOP", "index": 0}],
                         "usageMetadata": {"promptTokenCount": 300,
                                           "candidatesTokenCount": 220,
                                           "totalTokenCount": 520},
                         "modelVersion": MODEL, "responseId": f"r{i:08x}"},
            "source": {"harness": "bench", "instance": f"doc-{i}"}}


MAKERS: dict[str, tuple[str, Callable[[int, random.Random], dict[str, Any]]]] = {
    "chat": ("/v1/chat/completions", gen_run.chat_record),
    "completions": ("/v1/completions", gen_run.completion_record),
    "responses": ("/v1/responses", gen_run.responses_record),
    "messages": ("/v1/messages", messages_record),
    "gemini": (GEMINI, gemini_record),
}


def write_run(path: Path, records: int) -> dict[str, list[bytes]]:
    """A run of `records` records of each family; each family's request bodies, as a
    client sends them (Gemini's model is in its path: `fields`)."""
    rng = random.Random(0)
    bodies: dict[str, list[bytes]] = {name: [] for name in MAKERS}
    with path.open("wb") as f:
        for i in range(records):
            for name, (_, make) in MAKERS.items():
                record = make(i * len(MAKERS) + len(bodies[name]), rng)
                f.write(orjson.dumps(record) + b"\n")
                bodies[name].append(orjson.dumps(record["request"]))
    return bodies


class Case:
    """One family's requests, and what handing each to the replay costs."""

    def __init__(self, name: str, bodies: list[bytes]) -> None:
        self.name = name
        self.endpoint = MAKERS[name][0]
        self.fields = {"model": MODEL} if self.endpoint == GEMINI else None
        self.bodies = bodies
        family = family_of(self.endpoint)
        # the canonical keyed prompt of each request, made beforehand: only its hash is
        # irreducible
        self.canonical = []
        for body in bodies:
            request = family.parse(body, (), self.fields)
            if family.chained:  # (keyed once the model is known: no earlier turn here)
                request.key(None)
            self.canonical.append(keys.canonical(request.prompts[0]))

    def irreducible(self, part: slice) -> float:
        """Seconds per request: parse the body, hash its key."""
        loads, digest = orjson.loads, keys.digest
        bodies, canonical = self.bodies[part], self.canonical[part]
        start = time.perf_counter()
        for body, prompt in zip(bodies, canonical, strict=True):
            loads(body)
            digest(prompt)
        return (time.perf_counter() - start) / len(bodies)

    def handle(self, replayer: Replayer, part: slice) -> float:
        """Seconds per request of `Replayer.handle`, each a hit."""
        handle, endpoint, fields = replayer.handle, self.endpoint, self.fields
        bodies = self.bodies[part]
        start = time.perf_counter()
        for body in bodies:
            handle(endpoint, body, (), fields)
        return (time.perf_counter() - start) / len(bodies)


PASS = 50  # requests a pass: short, so that the fastest passes are those no other
# process interrupted (the machine is shared)


def timed(case: Case, fn: Callable[[slice], float], seconds: float) -> float:
    """Seconds per request of `fn` over the case's requests, PASS at a time: the mean over
    the parts of each part's fastest pass within about `seconds`."""
    parts = [slice(i, i + PASS) for i in range(0, len(case.bodies), PASS)]
    best = [fn(p) for p in parts]
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        best = [min(b, fn(p)) for b, p in zip(best, parts, strict=True)]
    return statistics.mean(best)


def replayers(run: Path, idx: Path) -> dict[str, Replayer]:
    loaded = load([str(run)], progress=False)
    return {"loaded": Replayer(loaded.index, Rules()),
            "index file": Replayer(StoredIndex(idx), Rules())}


def measure(cases: list[Case], served: dict[str, Replayer], rounds: int, seconds: float
            ) -> list[str]:
    figures: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        print(f"round {r + 1}/{rounds}", file=sys.stderr, flush=True)
        for case in cases:
            base = timed(case, case.irreducible, seconds)
            figures.setdefault((case.name, "irreducible"), []).append(base * 1e6)
            for how, replayer in served.items():
                cost = timed(case, partial(case.handle, replayer), seconds)
                figures.setdefault((case.name, how), []).append(cost * 1e6)
                figures.setdefault((case.name, how + " x"), []).append(cost / base)
    med = {k: statistics.median(v) for k, v in figures.items()}
    lines = ["| family | irreducible µs | " + " | ".join(
        f"{how} µs | {how} x irreducible" for how in served) + " |",
        "| --- | --- | " + " | ".join("--- | ---" for _ in served) + " |"]
    for case in cases:
        cells = " | ".join(f"{med[(case.name, how)]:.1f} | {med[(case.name, how + ' x')]:.1f}"
                           for how in served)
        lines.append(f"| {case.name} | {med[(case.name, 'irreducible')]:.1f} | {cells} |")
    return lines


def profile(case: Case, replayer: Replayer, seconds: float) -> None:
    profiler = cProfile.Profile()
    deadline = time.perf_counter() + seconds
    profiler.enable()
    while time.perf_counter() < deadline:
        case.handle(replayer, slice(None))
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000, help="saved records per family")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--seconds", type=float, default=0.3,
                        help="seconds per cell per round (the fastest passes are kept)")
    parser.add_argument("--families", default=",".join(MAKERS),
                        help="which families (comma-separated)")
    parser.add_argument("--profile", metavar="FAMILY", help="cProfile `handle` for FAMILY")
    parser.add_argument("--from-file", action="store_true",
                        help="with --profile: served from the index file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-handle-") as tmp:
        run, idx = Path(tmp) / "run.jsonl", Path(tmp) / "run.idx"
        bodies = write_run(run, args.records)
        subprocess.run([sys.executable, "-m", "replay_server", "index", str(run), "-o",
                        str(idx)], check=True, capture_output=True, cwd=HERE.parent)
        served = replayers(run, idx)
        cases = [Case(name, bodies[name]) for name in args.families.split(",")]
        if args.profile:
            how = "index file" if args.from_file else "loaded"
            profile(next(c for c in cases if c.name == args.profile), served[how], 5.0)
            return
        print("\n".join(measure(cases, served, args.rounds, args.seconds)))
        for replayer in served.values():
            if isinstance(replayer.index, StoredIndex):
                replayer.index.db.close()
        assert isinstance(next(iter(served.values())).index, Index)


if __name__ == "__main__":
    main()
