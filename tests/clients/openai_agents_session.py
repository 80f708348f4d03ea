"""openai-agents with its default model (the Responses API): a plain run, a function tool
(two turns), a streamed run, and a second turn chained by previous_response_id."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI


@function_tool  # type: ignore[untyped-decorator]  # agents is not type-checked here
def calculator(expression: str) -> str:
    """Evaluates an arithmetic expression."""
    a, op, b = expression.split()
    return str({"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op])


async def main(url: str) -> dict[str, Any]:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)
    out: dict[str, Any] = {}
    agent = Agent(name="math", instructions="Answer briefly.")  # no model: the default
    out["plain"] = (await Runner.run(agent, "What is 12 + 7?")).final_output
    tools = Agent(name="math", instructions="Answer briefly.", tools=[calculator],
                  model_settings=ModelSettings(temperature=0))
    result = await Runner.run(tools, "Please use the calculator: what is 6 * 7?")
    out["tool"] = result.final_output
    out["tool_items"] = [type(i).__name__ for i in result.new_items]
    streamed = Runner.run_streamed(agent, "What is 5 + 8?")
    deltas = []
    async for event in streamed.stream_events():
        if event.type == "raw_response_event" and event.data.type == \
                "response.output_text.delta":
            deltas.append(event.data.delta)
    out["stream_deltas"] = deltas
    out["stream_final"] = streamed.final_output
    first = await Runner.run(agent, "What is 2 + 2?")
    second = await Runner.run(agent, "And 3 + 3?", previous_response_id=first.last_response_id)
    out["chain"] = [first.last_response_id, second.last_response_id, second.final_output]
    await client.close()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
