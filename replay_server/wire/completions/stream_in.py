"""A completions stream in: how one choice's delta adds to the answer being aggregated
(the stream itself is read in `choices/stream_in.py`)."""

from __future__ import annotations

from typing import Any

from ..choices.stream_in import Choice, ChoicesAggregator


def new_choice(index: int) -> dict[str, Any]:
    return {"index": index}


def merge(choice: Choice, part: dict[str, Any]) -> None:
    choice.add(choice.body, "text", part.get("text") or "")
    choice.common(part)


def repeat(choice: Choice, part: dict[str, Any]) -> tuple[dict[str, Any], str, list[str]] | None:
    """Where the one text of a delta that adds nothing else is (see ChoicesAggregator)."""
    if part.get("logprobs") is not None or part.get("text").__class__ is not str:
        return None
    return part, "text", choice.pieces(choice.body, "text")


def aggregator() -> ChoicesAggregator:
    return ChoicesAggregator("text_completion", merge, repeat, new_choice)
