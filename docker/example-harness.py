"""The example harness of docker/compose.yaml: a tiny eval over the bundled example run.

It asks the questions whose answers examples/demo-run.jsonl saved, through the OpenAI API
at OPENAI_BASE_URL (with OPENAI_API_KEY), scores the answers, and prints the accuracy, as
any harness would; it needs only Python's standard library. A request the replay server
cannot answer (HTTP 400 with a `replay_*` error code, such as `replay_no_match`: the
prompt was not saved) fails it. Put your own harness in its place: the compose file only
needs it to read OPENAI_BASE_URL.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

MODEL = "demo/tiny-chat-model"
# (endpoint, request, expected answer): chat and completions, as saved in the example run.
ITEMS: list[tuple[str, dict[str, Any], str]] = [
    ("/chat/completions",
     {"messages": [{"role": "system", "content": "Answer with a number only."},
                   {"role": "user", "content": "What is 2+2?"}],
      "max_tokens": 256, "temperature": 0.0},
     "4"),
    ("/completions",
     {"prompt": "The capital of France is", "max_tokens": 32, "temperature": 0.0,
      "stop": ["\n"]},
     "Paris."),
    ("/completions",
     {"prompt": "Question: What is 12 + 7?\nAnswer:", "max_tokens": 8, "temperature": 0.0,
      "stop": ["\n"]},
     "19"),
]


def ask(endpoint: str, request: dict[str, Any]) -> str:
    url = os.environ["OPENAI_BASE_URL"].rstrip("/") + endpoint
    body = json.dumps({"model": MODEL, **request}).encode()
    headers = {"Content-Type": "application/json",
               "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")}
    with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=60) as r:
        choice = json.load(r)["choices"][0]
    return str(choice["message"]["content"] if "message" in choice else choice["text"])


def main() -> int:
    correct = 0
    for endpoint, request, expected in ITEMS:
        try:
            answer = ask(endpoint, request)
        except urllib.error.HTTPError as error:
            print(f"{endpoint}: HTTP {error.code}: {error.read().decode()}", file=sys.stderr)
            return 1
        correct += answer.strip() == expected
        print(f"{endpoint}: {answer.strip()!r} (expected {expected!r})")
    print(f"accuracy: {correct}/{len(ITEMS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
