"""inspect_ai: the command of tests/data/gen/README.md (task inspect_arith: 6 samples, one
multi-turn, one tool call), and the scores read back from inspect's own log."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harnesses.commands import BIN, MODEL

# The openai-api provider reads FAKE_BASE_URL and FAKE_API_KEY for `openai-api/fake/...`.
PROVIDER_MODEL = f"openai-api/fake/{MODEL}"
PRINTED = rf"^\s*(accuracy|stderr|{PROVIDER_MODEL}) "


def command(log_dir: Path, *extra: str) -> list[str]:
    return [str(BIN / "inspect"), "eval", "inspect_arith.py", "--model", PROVIDER_MODEL,
            "--log-dir", str(log_dir), "--temperature", "0", "--display", "plain", *extra]


@dataclass
class Scores:
    status: str
    metrics: dict[str, float]  # "scorer/metric" -> value, from the log
    samples: dict[str, tuple[Any, ...]]  # sample id -> (completion, score, model calls)
    log: Path
    printed: list[str]


def read_scores(log_dir: Path, output: str) -> Scores:
    """The one log in `log_dir`, read with inspect_ai's own reader."""
    from inspect_ai.log import read_eval_log

    logs = list(log_dir.glob("*.eval"))
    assert len(logs) == 1, (logs, output[-3000:])
    log = read_eval_log(str(logs[0]))
    metrics = {f"{s.name}/{name}": m.value for s in (log.results.scores if log.results else [])
               for name, m in s.metrics.items()}
    samples = {}
    for sample in log.samples or []:
        calls = [event.output.completion for event in sample.events if event.event == "model"]
        score = {k: v.value for k, v in (sample.scores or {}).items()}
        samples[str(sample.id)] = (sample.output.completion, score, calls)
    printed = [line.strip() for line in output.splitlines() if re.match(PRINTED, line)]
    return Scores(log.status, metrics, samples, logs[0], printed)
