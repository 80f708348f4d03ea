"""lighteval custom tasks on local data, for tests/data/gen/make_lighteval_evalscope.py.

    lighteval endpoint litellm MODEL.yaml "arith_lighteval|1" --custom-tasks lighteval_arith.py

The dataset is the local folder `lighteval_arith_data/` (`test.jsonl` = the 6 questions
of `arith.jsonl`, `train.jsonl` = the 2 few-shot examples of `arith_train.jsonl`); lighteval
loads it with `datasets.load_dataset(<folder>, "default")`, so nothing comes from the hub.

- `arith_lighteval`: greedy, one generation per question, scored by the last number.
- `arith_lighteval_sampled`: the same questions with maj@3 / avg@3, so lighteval asks for
  3 samples (`n: 3` on the wire; it needs temperature > 0).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from lighteval.metrics.metrics_sample import AvgAtN, MajAtN, SampleLevelComputation
from lighteval.metrics.utils.metric_utils import SampleLevelMetric
from lighteval.tasks.lighteval_task import LightevalTaskConfig
from lighteval.tasks.requests import Doc, SamplingMethod

DATA = str(Path(__file__).resolve().parent / "lighteval_arith_data")
NUMBER = re.compile(r"-?\d+")


def last_number(text: str) -> str:
    found = NUMBER.findall(text or "")
    return found[-1] if found else ""


def arith_prompt(line: dict, task_name: str = "") -> Doc:
    return Doc(
        task_name=task_name,
        query=f"Question: {line['question']}\nAnswer:",
        choices=[f"The answer is {line['answer']}."],
        gold_index=0,
        specific={"id": line["id"]},
    )


class LastNumberMatch(SampleLevelComputation):
    """1 when the last number of the (first) prediction equals the gold answer's."""

    def compute(self, doc: Doc, model_response, **kwargs) -> float:
        return float(last_number(model_response.final_text[0]) == last_number(doc.get_golds()[0]))


def _score_one(doc: Doc, model_response) -> float:
    return float(last_number(model_response.final_text[0]) == last_number(doc.get_golds()[0]))


last_number_match = SampleLevelMetric(
    metric_name="last_number_match",
    sample_level_fn=LastNumberMatch(),
    category=SamplingMethod.GENERATIVE,
    corpus_level_fn=np.mean,
    higher_is_better=True,
)
maj_at_3 = SampleLevelMetric(
    metric_name="maj@3",
    sample_level_fn=MajAtN(n=3, normalize=last_number),
    category=SamplingMethod.GENERATIVE,
    corpus_level_fn=np.mean,
    higher_is_better=True,
)
avg_at_3 = SampleLevelMetric(
    metric_name="avg@3",
    sample_level_fn=AvgAtN(n=3, sample_scoring_function=_score_one),
    category=SamplingMethod.GENERATIVE,
    corpus_level_fn=np.mean,
    higher_is_better=True,
)

_common = dict(
    prompt_function=arith_prompt,
    hf_repo=DATA,
    hf_subset="default",
    hf_avail_splits=["train", "test"],
    evaluation_splits=["test"],
    few_shots_split="train",
    few_shots_select="sequential",
    generation_size=64,
    stop_sequence=["Question:"],
)

TASKS_TABLE = [
    LightevalTaskConfig(name="arith_lighteval", metrics=[last_number_match], **_common),
    LightevalTaskConfig(name="arith_lighteval_sampled", metrics=[maj_at_3, avg_at_3], **_common),
]
