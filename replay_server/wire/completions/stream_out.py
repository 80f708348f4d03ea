"""A completion streamed: the deltas of one saved choice, as vLLM/OpenAI send them (the
frames are made in `choices/stream_out.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..choices.stream_out import MARK, ChoicesStream, Delta, Run
from ..pieces import first_piece

_LOGPROB_LISTS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


def deltas(choice: dict[str, Any]) -> Iterator[Delta]:
    """One token a delta, with its logprobs, where the saved logprobs spell out the text;
    else the text piece by piece, the logprobs (if any) with the first."""
    text = choice.get("text") or ""
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if isinstance(logprobs, dict) and isinstance(tokens, list) and tokens and all(
            isinstance(t, str) for t in tokens) and "".join(tokens) == text and all(
            isinstance(logprobs.get(k), list) and len(logprobs[k]) == len(tokens)
            for k in _LOGPROB_LISTS if k in logprobs):
        for i in range(len(tokens)):
            sliced = {k: (v[i:i + 1] if k in _LOGPROB_LISTS else v) for k, v in logprobs.items()}
            yield {"text": tokens[i], "logprobs": sliced}
        return
    first = first_piece(text)
    yield {"text": first, "logprobs": logprobs}
    yield Run("text", {"text": MARK, "logprobs": None}, text[len(first):])


STREAM = ChoicesStream("text_completion", deltas, {"text": ""})
