"""The streams replay-server sends are, byte for byte, the golden ones in
`tests/data/golden_streams` (written by `tests/data/gen/make_golden_streams.py`): chat,
completions and Responses, from saved bodies and from recorded frames, `include_usage`
both ways."""

from __future__ import annotations

import importlib.util
from typing import Any

import orjson
import pytest

from tests.wire.golden import OUT, stream

CASES = [orjson.loads(line) for line in (OUT / "cases.jsonl").read_bytes().splitlines()]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_stream_is_its_golden_bytes(case: dict[str, Any]) -> None:
    assert stream(case) == (OUT / f"{case['name']}.sse").read_bytes()


def test_the_golden_cases_are_the_ones_the_script_writes() -> None:
    path = OUT.parent / "gen" / "make_golden_streams.py"
    spec = importlib.util.spec_from_file_location("make_golden_streams", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert orjson.loads(orjson.dumps(script.cases())) == CASES
    assert {p.stem for p in OUT.glob("*.sse")} == {c["name"] for c in CASES}
