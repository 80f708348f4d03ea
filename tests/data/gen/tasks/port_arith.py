"""inspect_ai side of the cross-harness port check (tests/test_harnesses.py): lm-eval's
arith_chat_greedy, rebuilt for inspect_ai so that it sends lm-eval's exact messages (the
system instruction, one few-shot exchange as a dialogue, then the question).

PORT_ANSWER (default "Answer:") changes the prompt template, to see a port that drifted.
"""

import json
import os
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser
from inspect_ai.scorer import pattern
from inspect_ai.solver import generate

HERE = Path(__file__).parent
SYSTEM = "You are a helpful math assistant. End with 'The answer is N.'"
ANSWER = os.environ.get("PORT_ANSWER", "Answer:")


def rows(name: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line]


@task
def port_arith() -> Task:
    shot = rows("arith_train.jsonl")[0]

    def question(row: dict[str, str]) -> str:
        return f"Question: {row['question']}\n{ANSWER}"

    samples = [
        Sample(id=row["id"], target=row["answer"], input=[
            ChatMessageSystem(content=SYSTEM),
            ChatMessageUser(content=question(shot)),
            ChatMessageAssistant(content=f"The answer is {shot['answer']}."),
            ChatMessageUser(content=question(row)),
        ])
        for row in rows("arith.jsonl")
    ]
    return Task(dataset=MemoryDataset(samples), solver=generate(),
                scorer=pattern(r"The answer is (-?[0-9]+)"))
