"""HELM rescored from its own run folders: helm-run of a local scenario against the fake
model (the original), then the same helm-run under `replay-server run` serving that run's
scenario_state.json files alone gives the same per-instance stats; a changed adapter
setting fails `run`, naming the requests it could not answer.

HELM runs from a venv of its own, made once per machine without torch, which crfm-helm
depends on and its API clients never import (`helm_runs.helm_run`).
tests/saved/formats/test_helm.py checks the same reader against HELM's saved output and
wire log in `make check` too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakemodel.server import create_app as fake_model
from tests.harnesses import helm_runs
from tests.harnesses.commands import MODEL, REPLAY, Ran, run
from tests.support import running

pytestmark = [pytest.mark.harness, pytest.mark.http, pytest.mark.slow,
              pytest.mark.xdist_group("helm")]
# a stat that measures the request's time, not its answer
TIMING = {"inference_runtime"}


@dataclass
class Original:
    helm: str  # the helm-run
    runs: Path  # OUT/runs/replay: one folder per run entry


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Original]:
    """The five run entries of helm_runs against the fake model."""
    helm = helm_runs.helm_run()
    work = tmp_path_factory.mktemp("helm-original")
    env = helm_runs.workspace(work)
    with running(fake_model([MODEL])) as url:
        env.update(OPENAI_BASE_URL=url)
        ran = run("helm original", helm_runs.command(helm, work / "out", helm_runs.ENTRIES),
                  env, work)
    assert ran.code == 0, ran.output[-4000:]
    yield Original(helm, work / "out" / "runs" / helm_runs.SUITE)


def rescore(original: Original, work: Path, entries: list[str], *flags: str) -> Ran:
    """helm-run of `entries` under `replay-server run --strict` serving the original's run
    folders, in a fresh working directory (HELM's request cache starts empty)."""
    env = helm_runs.workspace(work)
    args = [*REPLAY, "run", "--strict", *flags, str(original.runs), "--",
            *helm_runs.command(original.helm, work / "out", entries)]
    return run("helm rescored", args, env, work, printed=r"^replay-server run:|^  (miss|model) ")


def stats(run_folder: Path) -> list[tuple[Any, ...]]:
    """Every instance's every stat but the timing ones, as HELM wrote them."""
    return [(i["instance_id"], i["train_trial_index"], s["name"], s["sum"], s["count"])
            for i in helm_runs.per_instance(run_folder) for s in i["stats"]
            if s["name"]["name"] not in TIMING]


def test_rescored_from_scenario_state_alone_gives_the_same_per_instance_stats(
        original: Original, tmp_path: Path) -> None:
    ran = rescore(original, tmp_path, helm_runs.ENTRIES)
    assert ran.code == 0, ran.output[-4000:]
    rescored = tmp_path / "out" / "runs" / helm_runs.SUITE
    names = sorted(p.name for p in original.runs.glob("replay_arith*:*"))
    assert len(names) == 5
    assert sorted(p.name for p in rescored.glob("replay_arith*:*")) == names
    for name in names:
        assert stats(rescored / name) == stats(original.runs / name), name
        scored = "logprob" if "_lm:" in name else "exact_match"  # scores that vary
        assert any(s[2]["name"] == scored and s[3] for s in stats(original.runs / name))


@pytest.mark.parametrize(("change", "error"), [("max_train_instances=1", "replay_no_match"),
                                              ("max_tokens=8", "replay_params_mismatch"),
                                              ("num_outputs=2", "replay_n_mismatch")])
def test_a_changed_adapter_setting_fails_run(original: Original, tmp_path: Path,
                                             change: str, error: str) -> None:
    """Another prompt (fewer in-context examples) is a miss; another max_tokens a
    parameter mismatch (`--strict`); more samples than were saved cannot be served.
    `--stop-on-miss`: HELM retries a failed request 5 times, 10 s to 80 s apart."""
    ran = rescore(original, tmp_path, [f"{helm_runs.ENTRIES[0]},{change}"],
                  "--allow-unused", "--stop-on-miss")
    assert ran.code != 0, ran.output[-4000:]
    assert f"  - [{error}] /v1/chat/completions model=tiny-model: " in ran.output
    assert "replay-server run: 1 distinct request(s) got no saved generation" in ran.output
