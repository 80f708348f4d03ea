"""dspy: Predict and streamify (a StreamListener on the answer field), over chat
completions (dspy's default) and over the Responses API (model_type="responses")."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import dspy
from dspy.streaming import StreamListener, StreamResponse

MODEL = "tiny-model"


async def session(lm: dspy.LM) -> dict[str, Any]:
    dspy.configure(lm=lm)
    predict = dspy.Predict("question -> answer")
    out: dict[str, Any] = {"predict": predict(question="What is 12 + 7?").answer}
    streaming = dspy.streamify(predict, stream_listeners=[StreamListener("answer")])
    chunks, final = [], None
    async for item in streaming(question="What is 5 + 8?"):
        if isinstance(item, StreamResponse):
            chunks.append(item.chunk)
        elif isinstance(item, dspy.Prediction):
            final = item.answer
    out["stream_chunks"], out["stream_final"] = chunks, final
    return out


async def main(url: str) -> dict[str, Any]:
    chat = dspy.LM(f"openai/{MODEL}", api_base=url, api_key="x", temperature=0, cache=False,
                   num_retries=0)
    responses = dspy.LM(f"openai/{MODEL}", api_base=url, api_key="x", temperature=0,
                        cache=False, num_retries=0, model_type="responses")
    return {"chat": await session(chat), "responses": await session(responses)}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
