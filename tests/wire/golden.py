"""The golden streams (`tests/data/golden_streams`, written by
`tests/data/gen/make_golden_streams.py`): a case streamed with the live code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from replay_server.index.index import Bodies, Exchange
from replay_server.wire.families import family_of
from replay_server.wire.responses.stream_out import events_for

OUT = Path(__file__).resolve().parents[1] / "data" / "golden_streams"


def exchange(bodies: Bodies, body: dict[str, Any], recorded: str | None = None,
             recorded_usage: bool = False) -> Exchange:
    start, size = bodies.add(orjson.dumps(body))
    frames = (*bodies.add(recorded.encode()), recorded_usage) if recorded is not None \
        else None
    n = len(body.get("choices") or [None])
    return Exchange(bodies, start, size, n, "golden.jsonl", 1, None, b"{}", stream=frames)


def stream(case: dict[str, Any]) -> bytes:
    """The bytes replay-server streams for a case: its saved answers (per prompt, a list of
    [body, choice or None]), a recorded stream's frames if it has them."""
    if case.get("terminal_by_status"):
        return b"".join(events_for(case["answers"][0][0][0], terminal_by_status=True))
    bodies = Bodies()
    selections = [[(exchange(bodies, body, case.get("recorded"),
                             case.get("recorded_usage", False)), choice)
                   for body, choice in prompt] for prompt in case["answers"]]
    return family_of(case["endpoint"]).stream(selections, case["include_usage"])
