"""inspect_ai task for the replay-server test data: arithmetic questions, one
multi-turn sample and one sample that makes the fake model call the calculator tool."""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import Sample, json_dataset
from inspect_ai.model import ChatMessageAssistant, ChatMessageUser
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, system_message, use_tools
from inspect_ai.tool import tool

HERE = Path(__file__).parent


@tool
def calculator():
    async def execute(expression: str) -> str:
        """Evaluate an arithmetic expression with integers and + - * /.

        Args:
            expression: The expression, e.g. "12 + 7".
        """
        a, op, b = expression.split()
        x, y = int(a), int(b)
        return str({"+": x + y, "-": x - y, "*": x * y, "/": x // y if y else 0}[op])

    return execute


def record_to_sample(record: dict) -> Sample:
    inp = record["input"]
    if isinstance(inp, list):
        inp = [
            ChatMessageUser(content=m["content"])
            if m["role"] == "user"
            else ChatMessageAssistant(content=m["content"])
            for m in inp
        ]
    return Sample(id=record["id"], input=inp, target=record["target"])


@task
def inspect_arith():
    return Task(
        dataset=json_dataset(str(HERE / "inspect_arith.jsonl"), record_to_sample),
        solver=[
            system_message("You are a careful calculator. Answer with 'The answer is N.'"),
            use_tools(calculator()),
            generate(),
        ],
        scorer=includes(),
    )
