"""inspect_ai task for the judge recipe (docs/judges.md): inspect_arith's samples and
solver, scored by a model-graded scorer whose grader is the `grader` model role
(`--model-role grader=...`), or the model named by `-T grader=...` (the scorer's `model=`)."""

import importlib.util
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.scorer import model_graded_fact

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("inspect_arith", HERE / "inspect_arith.py")
assert _spec is not None and _spec.loader is not None
arith = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(arith)


@task
def inspect_judge(grader: str | None = None):
    base = arith.inspect_arith()
    scorer = model_graded_fact(model=grader) if grader else model_graded_fact()
    return Task(dataset=base.dataset, solver=base.solver, scorer=scorer)
