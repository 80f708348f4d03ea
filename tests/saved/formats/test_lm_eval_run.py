"""An lm-eval run's settings from its results file (saved/formats/lm_eval_run.py)."""

from __future__ import annotations

import json
from pathlib import Path

from replay_server.saved.formats import LoadContext
from replay_server.saved.formats.lm_eval_run import Run, run_of

DATE = "2026-12-06T15-25-46.632640"


def test_model_args_are_read_as_lm_eval_parses_its_k_v_string(tmp_path: Path) -> None:
    """lm-eval's `simple_parse_args_string`: a quoted value is the string inside the quotes,
    `None` is None (not a setting that fails the results file), `TRUE` is True."""
    (tmp_path / f"results_{DATE}.json").write_text(json.dumps({"config": {
        "model": "local-completions",
        "model_args": "model='tiny-model',custom_prefix_token_id=None,add_bos_token=TRUE,"
                      "max_length=10,seed=7"}}))
    samples = tmp_path / f"samples_ppl_text_{DATE}.jsonl"
    assert run_of(samples, DATE, LoadContext()) == Run(
        model="tiny-model", source="local-completions", seed=7, add_bos_token=True,
        max_length=10, custom_prefix_token_id=None)
