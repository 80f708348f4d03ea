"""A client that asks for each saved sample in a call of its own (`n=1`, as lm-eval's
`repeats` does, and any provider without `n`): olmo-eval's saved requests
(expected_requests.jsonl), each sent `n` times with `n=1`, in order, to OPENAI_BASE_URL.
The saved run holds the `n` samples of an instance in saved order, so the server must hand
them out one per call, in that order, exactly once, whichever replica answers.

Usage: python -m tests.scale.one_sample_calls EXPECTED OUT [--pause-after K DIR]
OUT gets one JSON line per instance: its source and the texts it got. With --pause-after,
after K calls it writes DIR/paused and waits for DIR/go (so that a test can take a replica
out while no call is in flight), then goes on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx


def main(argv: list[str]) -> None:
    expected, out = Path(argv[0]), Path(argv[1])
    pause_after, pause_dir = (int(argv[3]), Path(argv[4])) if argv[2:3] == ["--pause-after"] \
        else (None, None)
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    calls = 0
    rows = []
    with httpx.Client(timeout=30, headers={"authorization": "Bearer test-key"}) as client:
        for line in expected.read_text().splitlines():
            saved = json.loads(line)
            if "texts" not in saved["expect"]:  # (an unusable instance: nothing to ask)
                continue
            texts = []
            for _ in range(saved["request"].get("n", 1)):
                if calls == pause_after and pause_dir is not None:
                    (pause_dir / "paused").touch()
                    while not (pause_dir / "go").exists():
                        time.sleep(0.05)
                response = client.post(base + saved["path"].removeprefix("/v1"),
                                       json={**saved["request"], "n": 1})
                calls += 1
                response.raise_for_status()
                choice = response.json()["choices"][0]
                texts.append(choice["message"]["content"] if "message" in choice
                             else choice["text"])
            rows.append({"source": saved["source"], "texts": texts,
                         "expected": saved["expect"]["texts"]})
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    main(sys.argv[1:])
