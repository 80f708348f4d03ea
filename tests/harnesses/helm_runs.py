"""HELM (`crfm-helm`) as the tests and tests/data/gen/make_helm_data.py run it: a local
arithmetic scenario (the plugin tests/data/gen/tasks/helm/helm_arith.py) against an
OpenAI-compatible deployment whose address is the one the openai SDK reads from
OPENAI_BASE_URL (the deployment sets no `base_url`), so that the same configuration
runs against the fake model and under `replay-server run`.

crfm-helm 0.5.16 depends on torch (and its CUDA wheels: some 6 GB), which its API
clients and these scenarios never import: the test runs it from a venv of its own made
without torch (`helm_run`: some 830 MB, made once per machine), or from the `helm-run`
REPLAY_TEST_HELM_RUN names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.harnesses.commands import ROOT, offline_env
from tests.support import venv_python

PLUGIN = ROOT / "tests" / "data" / "gen" / "tasks" / "helm"
HELM_RUN_VAR = "REPLAY_TEST_HELM_RUN"
REQUIREMENT = "crfm-helm[openai]==0.5.16"  # the version tests/data/helm was written by
SUITE = "replay"

# Two deployments of one model: HELM's chat client and its legacy completions client.
DEPLOYMENTS = """\
model_deployments:
  - name: fake/tiny-model-chat
    model_name: fake/tiny-model
    tokenizer_name: simple/tokenizer1
    max_sequence_length: 2048
    client_spec:
      class_name: "helm.clients.openai_client.OpenAIClient"
  - name: fake/tiny-model-completions
    model_name: fake/tiny-model
    tokenizer_name: simple/tokenizer1
    max_sequence_length: 2048
    client_spec:
      class_name: "helm.clients.openai_client.OpenAILegacyCompletionsClient"
"""
METADATA = """\
models:
  - name: fake/tiny-model
    display_name: Tiny fake model
    description: replay-server's fake model (tests/fakemodel)
    creator_organization_name: replay-server
    access: open
    release_date: 2026-01-01
    tags: [TEXT_MODEL_TAG, FULL_FUNCTIONALITY_TEXT_MODEL_TAG]
"""
MODEL = "model=fake/tiny-model,model_deployment=fake/tiny-model-"
# greedy and sampled (n=3 / n=2, temperature 0.7), through chat and through completions;
# and language modeling (echo_prompt, max_tokens 0: scored from the prompt's own logprobs)
ENTRIES = [f"replay_arith:{MODEL}chat",
           f"replay_arith:{MODEL}chat,num_outputs=3,temperature=0.7",
           f"replay_arith:{MODEL}completions",
           f"replay_arith:{MODEL}completions,num_outputs=2,temperature=0.7",
           f"replay_arith_lm:{MODEL}completions"]


def helm_run() -> str:
    """The `helm-run` to test with: REPLAY_TEST_HELM_RUN's, else that of a venv made once
    with crfm-helm's OpenAI clients and without torch."""
    path = os.environ.get(HELM_RUN_VAR)
    if path:
        return path
    return str(Path(venv_python("helm-venv", REQUIREMENT, without=("torch",))).parent / "helm-run")


def workspace(cwd: Path) -> dict[str, str]:
    """A HELM working directory (prod_env/ with the deployments) and its environment:
    offline, the plugin importable, and nltk's `punkt_tab` present as an empty folder
    (HELM's metrics download it at start-up, a network call; the metrics used here never
    read it)."""
    (cwd / "prod_env").mkdir(parents=True, exist_ok=True)
    (cwd / "prod_env" / "model_deployments.yaml").write_text(DEPLOYMENTS)
    (cwd / "prod_env" / "model_metadata.yaml").write_text(METADATA)
    (cwd / "nltk" / "tokenizers" / "punkt_tab").mkdir(parents=True, exist_ok=True)
    env = offline_env(cwd)
    env.update(PYTHONPATH=str(PLUGIN), NLTK_DATA=str(cwd / "nltk"))
    return env


def command(helm: str, out: Path, entries: list[str]) -> list[str]:
    """helm-run of `entries` (the 6 questions), one thread (requests in order), into
    OUT/runs/replay/."""
    return [helm, "--plugins", "helm_arith", "--suite", SUITE, "-n", "1", "-m", "6",
            "-o", str(out), "-r", *entries]


def per_instance(run: Path) -> list[dict[str, Any]]:
    """A run folder's per_instance_stats.json: every instance's every stat."""
    stats: list[dict[str, Any]] = json.loads((run / "per_instance_stats.json").read_text())
    return stats
