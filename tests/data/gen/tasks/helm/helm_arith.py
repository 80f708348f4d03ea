"""A HELM plugin (`helm-run --plugins helm_arith`, this folder on PYTHONPATH): the arithmetic
questions of tasks/arith.jsonl as a HELM scenario, and the run spec `replay_arith` whose
adapter settings come from the run entry (`replay_arith:max_tokens=8,temperature=0.7`; HELM's
own `num_outputs=3` expander sets the samples), so that a test can change one and see the
rescore fail. Local data only: no download."""

import json
from pathlib import Path

from helm.benchmark.adaptation.common_adapter_specs import (
    get_generation_adapter_spec,
    get_language_modeling_adapter_spec,
)
from helm.benchmark.metrics.common_metric_specs import (
    get_exact_match_metric_specs,
    get_language_modeling_metric_specs,
)
from helm.benchmark.run_spec import RunSpec, run_spec_function
from helm.benchmark.scenarios.scenario import (
    CORRECT_TAG,
    TEST_SPLIT,
    TRAIN_SPLIT,
    Input,
    Instance,
    Output,
    Reference,
    Scenario,
    ScenarioSpec,
)

TASKS = Path(__file__).resolve().parent.parent


class ArithScenario(Scenario):
    """tasks/arith_train.jsonl as the train split (the in-context examples, unless
    `test_only`: language modeling takes test instances only), arith.jsonl as test."""

    name = "replay_arith"
    description = "Small arithmetic questions (replay-server's tests)."
    tags = ["question answering"]

    def __init__(self, test_only: bool = False) -> None:
        super().__init__()
        self.test_only = test_only

    def get_instances(self, output_path: str) -> list[Instance]:
        instances: list[Instance] = []
        splits = ((TRAIN_SPLIT, "arith_train.jsonl"), (TEST_SPLIT, "arith.jsonl"))
        for split, file in splits[1:] if self.test_only else splits:
            for line in (TASKS / file).read_text().splitlines():
                row = json.loads(line)
                answer = Reference(Output(text=f"The answer is {row['answer']}."),
                                   tags=[CORRECT_TAG])
                instances.append(Instance(input=Input(text=row["question"]), references=[answer],
                                          split=split, id=row["id"]))
        return instances


@run_spec_function("replay_arith")
def get_replay_arith_spec(max_tokens: str = "16", temperature: str = "0.0",
                          max_train_instances: str = "2") -> RunSpec:
    adapter_spec = get_generation_adapter_spec(
        instructions="Answer with 'The answer is N.'", input_noun="Question", output_noun="Answer",
        max_train_instances=int(max_train_instances),
        max_tokens=int(max_tokens), temperature=float(temperature))
    return RunSpec(
        name=(f"replay_arith:max_tokens={max_tokens},temperature={temperature},"
              f"max_train_instances={max_train_instances}"),
        scenario_spec=ScenarioSpec(class_name="helm_arith.ArithScenario"),
        adapter_spec=adapter_spec,
        metric_specs=get_exact_match_metric_specs(),
        groups=["replay_arith"],
    )


@run_spec_function("replay_arith_lm")
def get_replay_arith_lm_spec() -> RunSpec:
    """Language modeling of the same questions: each sent whole with `echo_prompt` and
    `max_tokens: 0`, scored from the logprobs of its own tokens (the completions client)."""
    return RunSpec(
        name="replay_arith_lm",
        scenario_spec=ScenarioSpec(class_name="helm_arith.ArithScenario",
                                   args={"test_only": True}),
        adapter_spec=get_language_modeling_adapter_spec(),
        metric_specs=get_language_modeling_metric_specs([]),
        groups=["replay_arith_lm"],
    )
