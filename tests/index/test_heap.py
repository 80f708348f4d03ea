"""Memory the process freed goes back to the system."""

from __future__ import annotations

import pytest

from replay_server.index import heap


def resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(heap._TRIM is None, reason="no malloc_trim here (not glibc)")
def test_trim_returns_the_holes_between_objects_that_stay() -> None:
    """How loading leaves the heap: many prompts freed, every twentieth object kept."""
    kept: list[bytes] = []
    freed: list[bytes] = []
    for i in range(40_000):
        (kept if i % 20 == 0 else freed).append(b"%d" % i * 300)  # some 1.5 KB each
    freed.clear()
    before = resident()
    heap.trim()
    assert before - resident() > 30_000_000
    assert len(kept) == 2000


def test_trim_does_nothing_where_there_is_no_malloc_trim(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(heap, "_TRIM", None)
    heap.trim()
