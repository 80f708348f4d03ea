#!/usr/bin/env python3
"""Regenerate tests/data/helm/ with the real HELM (crfm-helm) against the fake model.

crfm-helm pulls torch and CUDA wheels (some 6 GB), so it has a venv of its own, and this
script runs from the project's venv (which runs the fake model server) and calls its
`helm-run`:

    .venv/bin/uv venv /tmp/helm-venv --python python3.11
    .venv/bin/uv pip install --python /tmp/helm-venv/bin/python 'crfm-helm[openai]==0.5.16'
    .venv/bin/python tests/data/gen/make_helm_data.py --helm-run /tmp/helm-venv/bin/helm-run

It starts the fake model server (tests/fakemodel/) on a free 127.0.0.1 port with a wire
log, runs the five run entries of tests/harnesses/helm_runs.py (chat and legacy
completions, greedy and sampled; language modeling) in a fresh working directory (so
HELM's request cache starts empty), and copies what a HELM run folder keeps of each run
(`scenario_state.json`, `run_spec.json`, `per_instance_stats.json`, `stats.json`) into
tests/data/helm/runs/replay/<run>/, with the wire log beside (`tests/data/helm/wire.jsonl`).
Finally it checks that every request state's completions are the texts the wire answered.
Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

GEN = Path(__file__).resolve().parent
sys.path.insert(0, str(GEN))
sys.path.insert(0, str(GEN.parents[2]))

import make_harness_data as mhd  # noqa: E402  (FakeServer, run)

from tests.harnesses import helm_runs  # noqa: E402

OUT = mhd.REPO / "tests" / "data" / "helm"
KEPT = ("scenario_state.json", "run_spec.json", "per_instance_stats.json", "stats.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--helm-run", required=True, help="the helm-run of crfm-helm's venv")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = helm_runs.workspace(work)
        wire = work / "wire.jsonl"
        with mhd.FakeServer(wire, env) as fake:
            env.update(OPENAI_BASE_URL=f"{fake.base}/v1", OPENAI_API_KEY="test-key")
            mhd.run(helm_runs.command(args.helm_run, work / "out", helm_runs.ENTRIES), env,
                    work, work / "helm.log")
        shutil.rmtree(OUT, ignore_errors=True)
        for run in sorted((work / "out" / "runs" / helm_runs.SUITE).glob("replay_arith*:*")):
            dest = OUT / "runs" / helm_runs.SUITE / run.name
            dest.mkdir(parents=True)
            for name in KEPT:
                shutil.copy(run / name, dest / name)
        shutil.copy(wire, OUT / "wire.jsonl")
    check()


def check() -> None:
    """Every completion HELM saved is a text the wire answered, for the prompt it was sent."""
    answered: dict[str, list[str]] = {}
    for line in (OUT / "wire.jsonl").read_text().splitlines():
        call = json.loads(line)
        request, choices = call["request"], call["response"]["choices"]
        prompt = request.get("prompt") or request["messages"][-1]["content"]
        texts = [c.get("text") if "text" in c else c["message"]["content"] for c in choices]
        answered.setdefault(prompt, []).extend(texts)
    states = 0
    for path in OUT.glob("runs/*/*/scenario_state.json"):
        for state in json.loads(path.read_text())["request_states"]:
            texts = [c["text"] for c in state["result"]["completions"]]
            assert set(texts) <= set(answered[state["request"]["prompt"]]), (path, texts)
            states += 1
    print(f"checked {states} request states against {OUT / 'wire.jsonl'}")


if __name__ == "__main__":
    main()
