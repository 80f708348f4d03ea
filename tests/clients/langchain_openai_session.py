"""langchain-openai ChatOpenAI(use_responses_api=True): invoke, stream, bound tools over
two turns, and a conversation chained by previous_response_id."""

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

MODEL = "tiny-model"


@tool  # type: ignore[untyped-decorator]  # langchain is not type-checked here
def calculator(expression: str) -> str:
    """Evaluates an arithmetic expression."""
    a, op, b = expression.split()
    return str({"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op])


def main(url: str) -> dict[str, Any]:
    llm = ChatOpenAI(model=MODEL, base_url=url, api_key="x", use_responses_api=True,
                     temperature=0, max_retries=0)
    out: dict[str, Any] = {"invoke": llm.invoke("What is 12 + 7?").content}
    out["stream_chunks"] = [c.content for c in llm.stream("What is 5 + 8?")]
    bound = llm.bind_tools([calculator])
    messages: list[BaseMessage] = [HumanMessage("Please use the calculator: what is 6 * 7?")]
    ai = bound.invoke(messages)
    messages.append(ai)
    for call in ai.tool_calls:
        messages.append(ToolMessage(calculator.invoke(call["args"]), tool_call_id=call["id"]))
    out["tool_calls"] = [(c["name"], c["args"]) for c in ai.tool_calls]
    out["tool"] = bound.invoke(messages).content
    chained = ChatOpenAI(model=MODEL, base_url=url, api_key="x", use_responses_api=True,
                         use_previous_response_id=True, max_retries=0)
    history: list[BaseMessage] = [HumanMessage("What is 2 + 2?")]
    history.append(chained.invoke(history))
    history.append(HumanMessage("And 3 + 3?"))
    out["chain"] = chained.invoke(history).content
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
