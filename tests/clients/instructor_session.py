"""instructor with Mode.RESPONSES_TOOLS: create, and create_partial (every partial as the
stream builds it), over the Responses API; and create_partial over chat (Mode.TOOLS)."""

from __future__ import annotations

import json
import sys
from typing import Any

import instructor
from openai import OpenAI
from pydantic import BaseModel

MODEL = "tiny-model"
QUESTION = [{"role": "user", "content": "Please use the calculator: what is 6 * 7?"}]


class Calculation(BaseModel):
    expression: str


def main(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in (instructor.Mode.RESPONSES_TOOLS, instructor.Mode.TOOLS):
        client = instructor.from_openai(OpenAI(base_url=url, api_key="x", max_retries=0),
                                        mode=mode)
        got = client.create(model=MODEL, response_model=Calculation, messages=QUESTION,
                            temperature=0, max_retries=0)
        partials = client.create_partial(model=MODEL, response_model=Calculation,
                                         messages=QUESTION, temperature=0, max_retries=0)
        out[mode.value] = {"create": got.expression,
                           "partials": [p.expression for p in partials]}
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
