"""deepeval's GEval, an LLM-judge metric, grading a candidate (the recipe of
docs/judges.md, run by tests/harnesses/test_judges.py under `replay-server run`).

    python deepeval_geval.py CANDIDATE JUDGE

The candidate is asked each question through OPENAI_BASE_URL (replayed from the saved
run); the judge is deepeval's LocalModel (an OpenAI-compatible server) at the same URL,
so that `run --upstream` forwards it. Prints one JSON object: question -> GEval score.
"""

import json
import os
import sys

import openai
from deepeval.metrics import GEval
from deepeval.models import LocalModel
from deepeval.test_case import LLMTestCase, SingleTurnParams

QUESTIONS = {"What is 12 + 7?": "19", "What is 23 + 19?": "42", "What is 9 * 8?": "72",
             "What is 100 - 37?": "63"}


def main(candidate: str, judge_model: str) -> None:
    client = openai.OpenAI(max_retries=0)
    judge = LocalModel(model=judge_model, base_url=os.environ["OPENAI_BASE_URL"],
                       api_key=os.environ["OPENAI_API_KEY"])
    metric = GEval(name="Correctness", model=judge, async_mode=False,
                   evaluation_steps=["Check that the actual output states the expected "
                                     "output's number as its answer."],
                   evaluation_params=[SingleTurnParams.ACTUAL_OUTPUT,
                                      SingleTurnParams.EXPECTED_OUTPUT])
    scores = {}
    for question, target in QUESTIONS.items():
        reply = client.chat.completions.create(
            model=candidate, temperature=0, messages=[{"role": "user", "content": question}])
        case = LLMTestCase(input=question, actual_output=reply.choices[0].message.content,
                           expected_output=target)
        scores[question] = metric.measure(case)
    print(json.dumps(scores))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
