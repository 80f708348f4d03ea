#!/usr/bin/env python3
"""Regenerate tests/data/lighteval/ and tests/data/evalscope/ with the real harnesses.

lighteval 0.13.0 and evalscope 1.14.1 cannot share a venv (lighteval pins
latex2sympy2_extended==1.0.6, evalscope's math-verify==0.9.0 needs 1.11.0), so this
script runs with the lighteval venv's Python (which also runs the fake model server: it
needs starlette, uvicorn and orjson) and calls evalscope from its own venv:

    /work/tvenv/bin/python tests/data/gen/make_lighteval_evalscope.py \
        [--evalscope /work/evenv/bin/evalscope] [--only CASE ...]

See tests/data/gen/requirements-torch-harnesses.txt for both venvs. For each case it
starts the fake model server (tests/fakemodel/) on a free 127.0.0.1 port with a fresh
state and a wire log, runs the harness in a fresh working directory (so lighteval's
`.litellm_cache` and its sample cache start empty) with every hub access switched off,
copies the harness's own output files, the wire log (`wire.jsonl`) and the score table
the harness printed (`printed_scores.txt`) into tests/data/<harness>/<case>/, and
finally cross-checks every saved output against the wire log. Only 127.0.0.1 is
contacted.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

GEN = Path(__file__).resolve().parent
sys.path.insert(0, str(GEN))

import make_harness_data as mhd  # noqa: E402  (FakeServer, offline_env, run, ...)

REPO = mhd.REPO
TASKS = mhd.TASKS
OUT_LIGHTEVAL = REPO / "tests" / "data" / "lighteval"
OUT_EVALSCOPE = REPO / "tests" / "data" / "evalscope"
MODEL = mhd.MODEL  # "tiny-model"
API_KEY = "test-key"  # lighteval writes it in clear into results_*.json; never a real key
SYSTEM_PROMPT = "You are a helpful math assistant. End with 'The answer is N.'"

# lighteval imports every built-in task module, and tasks/tasks/tiny_benchmarks.py
# downloads a pickle from GitHub at import time (a hard crash offline). This wrapper runs
# the unchanged `lighteval` CLI with requests.get refusing every non-loopback URL.
LIGHTEVAL_SHIM = """\
import sys
import requests

_get = requests.get


def _loopback_only_get(url, *args, **kwargs):
    if str(url).startswith(("http://127.0.0.1", "http://localhost")):
        return _get(url, *args, **kwargs)
    print(f"[offline] refused GET {url}", file=sys.stderr)
    response = requests.Response()
    response.status_code = 599
    response.url = str(url)
    response._content = b""
    return response


requests.get = _loopback_only_get
from lighteval.__main__ import app  # noqa: E402

sys.argv[0] = "lighteval"
sys.exit(app())
"""

ANSI = re.compile(r"\x1b\[[0-9;]*m")

LIGHTEVAL_CASES = {
    # case: (task spec, generation_parameters)
    "greedy": ("arith_lighteval|1", {}),
    "sampled": ("arith_lighteval_sampled|0", {"temperature": 0.7, "seed": 1234}),
}
EVALSCOPE_CASES = {
    # case: extra CLI args
    "plain": [],
    "repeats": [
        "--repeats",
        "3",
        "--generation-config",
        "temperature=0.7,seed=1234,max_tokens=64,top_p=0.95",
    ],
}


def fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def lighteval_case(case: str, tmp: Path, env: dict[str, str]) -> None:
    task, gen_params = LIGHTEVAL_CASES[case]
    work = fresh_dir(tmp / f"lighteval-{case}")
    (work / "lighteval_offline.py").write_text(LIGHTEVAL_SHIM)
    wire = work / "wire.jsonl"
    with mhd.FakeServer(wire, env) as srv:
        params = {
            "model_name": f"openai/{MODEL}",
            "base_url": f"{srv.base}/v1",
            "api_key": API_KEY,
            # set, so that lighteval never asks litellm or openrouter.ai for a context size
            "max_model_length": 2048,
            "concurrent_requests": 1,  # deterministic wire order
            "cache_dir": str(work / "lighteval-sample-cache"),
            "system_prompt": SYSTEM_PROMPT if case == "greedy" else None,
        }
        if gen_params:
            params["generation_parameters"] = gen_params
        params = {k: v for k, v in params.items() if v is not None}
        config = work / "model.yaml"
        config.write_text(json.dumps({"model_parameters": params}, indent=2))  # JSON is YAML
        out = mhd.run(
            [
                mhd.PY,
                "lighteval_offline.py",
                "endpoint",
                "litellm",
                str(config),
                task,
                "--custom-tasks",
                str(TASKS / "lighteval_arith.py"),
                "--output-dir",
                str(work / "out"),
                "--save-details",
            ],
            env,
            work,  # cwd: litellm's disk cache is ./.litellm_cache
            work / "stdout.txt",
        )
    dest = OUT_LIGHTEVAL / case
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(work / "out", dest)
    shutil.copy(wire, dest / "wire.jsonl")
    table = [ANSI.sub("", ln) for ln in out.splitlines() if ln.startswith("|")]
    (dest / "printed_scores.txt").write_text("\n".join(table) + "\n")
    print("\n".join(table))


def evalscope_case(case: str, tmp: Path, env: dict[str, str], evalscope: str) -> None:
    work = fresh_dir(tmp / f"evalscope-{case}")
    wire = work / "wire.jsonl"
    dataset_args = {
        "general_qa": {
            "local_path": str(TASKS),  # reads tasks/evalscope_arith.jsonl
            "subset_list": ["evalscope_arith"],
            "metric_list": ["Rouge"],  # BLEU needs nltk's punkt_tab (a download)
        }
    }
    with mhd.FakeServer(wire, env) as srv:
        out = mhd.run(
            [
                evalscope,
                "eval",
                "--model",
                MODEL,
                "--api-url",
                f"{srv.base}/v1",
                "--api-key",
                API_KEY,
                "--eval-type",
                "openai_api",
                "--datasets",
                "general_qa",
                "--dataset-args",
                json.dumps(dataset_args),
                "--work-dir",
                str(work / "out"),
                "--no-timestamp",
                *EVALSCOPE_CASES[case],
            ],
            env,
            work,
            work / "stdout.txt",
        )
    dest = OUT_EVALSCOPE / case
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for sub in ("predictions", "reviews", "configs"):
        shutil.copytree(work / "out" / sub, dest / sub)
    # reports/<model>/<dataset>.json; report.html (~85 KB of HTML) is left out
    no_html = shutil.ignore_patterns("*.html")
    shutil.copytree(work / "out" / "reports", dest / "reports", ignore=no_html)
    shutil.copy(wire, dest / "wire.jsonl")
    lines = [ANSI.sub("", ln).rstrip() for ln in out.splitlines()]
    start = next(i for i, ln in enumerate(lines) if "Overall report table" in ln)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    table = lines[start + 1 : end + 1]
    (dest / "printed_scores.txt").write_text("\n".join(table) + "\n")
    print("\n".join(table))


def wire_lines(case_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (case_dir / "wire.jsonl").read_text().splitlines()]


def check_lighteval() -> None:
    """Each parquet row's input/text/reasonings agree with the one wire exchange for it."""
    import pyarrow.parquet as pq

    for case in LIGHTEVAL_CASES:
        case_dir = OUT_LIGHTEVAL / case
        if not case_dir.exists():
            continue
        results = json.loads(next(case_dir.glob("results/*/*/results_*.json")).read_text())
        assert results["config_general"]["model_config"]["api_key"] == API_KEY
        assert results["config_general"]["model_name"] == f"openai/{MODEL}"
        wire = wire_lines(case_dir)
        by_messages = {json.dumps(w["request"]["messages"], sort_keys=True): w for w in wire}
        assert len(by_messages) == len(wire), "one request per prompt"
        rows = pq.read_table(next(case_dir.glob("details/*/*/*/details_*.parquet"))).to_pylist()
        assert len(rows) == len(wire) == 6
        for row in rows:
            mr = row["model_response"]
            w = by_messages[json.dumps(mr["input"], sort_keys=True)]  # input == wire messages
            req, choices = w["request"], w["response"]["choices"]
            assert req["model"] == MODEL and req["n"] == row["doc"]["num_samples"] == len(choices)
            assert mr["text"] == [c["message"]["content"] for c in choices]
            assert mr["reasonings"] == [c["message"]["reasoning"] for c in choices]
    print("lighteval details agree with the wire logs")


def evalscope_wire_messages(messages: list[dict]) -> list[dict]:
    """A prediction line's `messages` (the prompt + the generated turn) as sent on the wire."""
    sent = []
    for m in messages[:-1]:
        assert isinstance(m["content"], str), m  # no content parts in these prompts
        sent.append({"role": m["role"], "content": m["content"]})
    return sent


def check_evalscope() -> None:
    """Each prediction's request and answer agree with the wire exchange of the same id."""
    for case in EVALSCOPE_CASES:
        case_dir = OUT_EVALSCOPE / case
        if not case_dir.exists():
            continue
        config = next((case_dir / "configs").glob("task_config*.yaml")).read_text()
        assert API_KEY not in config  # evalscope masks it as '**********'
        wire = {w["response"]["id"]: w for w in wire_lines(case_dir)}
        preds = [
            json.loads(ln)
            for f in sorted(case_dir.glob("predictions/*/*.jsonl"))
            for ln in f.read_text().splitlines()
        ]
        assert len(preds) == len(wire), (len(preds), len(wire))
        for p in preds:
            w = wire[p["model_output"]["id"]]
            assert evalscope_wire_messages(p["messages"]) == w["request"]["messages"]
            (choice,) = p["model_output"]["choices"]
            (sent,) = w["response"]["choices"]
            content = choice["message"]["content"]
            if isinstance(content, list):  # reasoning -> [{"type":"reasoning"}, {"type":"text"}]
                parts = {c["type"]: c for c in content}
                assert parts["reasoning"]["reasoning"] == sent["message"]["reasoning"]
                content = parts["text"]["text"]
            else:
                assert sent["message"]["reasoning"] is None
            assert content == sent["message"]["content"]
            assert p["messages"][-1]["content"] == choice["message"]["content"]
            usage = w["response"]["usage"]
            assert p["model_output"]["usage"]["input_tokens"] == usage["prompt_tokens"]
            assert p["model_output"]["usage"]["output_tokens"] == usage["completion_tokens"]
    print("evalscope predictions agree with the wire logs")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only",
        nargs="*",
        default=[],
        help="cases: lighteval_greedy lighteval_sampled evalscope_plain evalscope_repeats",
    )
    default_es = Path(mhd.PY).parent / "evalscope"
    ap.add_argument(
        "--evalscope",
        default=str(default_es) if default_es.exists() else "/work/evenv/bin/evalscope",
        help="the evalscope executable of its own venv (default: %(default)s)",
    )
    ap.add_argument("--keep-tmp", action="store_true")
    a = ap.parse_args()
    only = set(a.only)
    tmp = Path(tempfile.mkdtemp(prefix="lighteval-evalscope-data-"))
    env = mhd.offline_env(tmp)
    env.update(
        {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm fetches its price list
            "MODELSCOPE_CACHE": str(tmp / "modelscope"),
            "NLTK_DATA": str(tmp / "nltk_data"),
        }
    )
    try:
        for case in LIGHTEVAL_CASES:
            if not only or f"lighteval_{case}" in only:
                lighteval_case(case, tmp, env)
        for case in EVALSCOPE_CASES:
            if not only or f"evalscope_{case}" in only:
                evalscope_case(case, tmp, env, a.evalscope)
        check_lighteval()
        check_evalscope()
    finally:
        if a.keep_tmp:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
