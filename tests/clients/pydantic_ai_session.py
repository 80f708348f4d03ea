"""pydantic-ai with OpenAIResponsesModel: a run, a function tool (two turns), a streamed
run (text deltas), and a follow-up with the message history."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

MODEL = "tiny-model"


def calculator(expression: str) -> str:
    """Evaluates an arithmetic expression."""
    a, op, b = expression.split()
    return str({"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op])


async def main(url: str) -> dict[str, Any]:
    model = OpenAIResponsesModel(MODEL, provider=OpenAIProvider(base_url=url, api_key="x"))
    agent = Agent(model, instructions="Answer briefly.")
    out: dict[str, Any] = {}
    out["plain"] = (await agent.run("What is 12 + 7?", model_settings={"temperature": 0})).output
    tools = Agent(model, instructions="Answer briefly.", tools=[calculator])
    result = await tools.run("Please use the calculator: what is 6 * 7?")
    out["tool"] = result.output
    out["tool_parts"] = [type(p).__name__ for m in result.all_messages() for p in m.parts]
    async with agent.run_stream("What is 5 + 8?") as stream:
        out["stream_deltas"] = [d async for d in stream.stream_text(delta=True,
                                                                       debounce_by=None)]
    second = await agent.run("And 3 + 3?", message_history=result.all_messages())
    out["follow_up"] = second.output
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
