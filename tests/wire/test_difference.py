"""Where a request first differs from the nearest saved prompt, in words that group well."""

from __future__ import annotations

from typing import Any

import pytest

from replay_server.wire.difference import first_difference


def chat(*texts: str) -> dict[str, Any]:
    return {"kind": "chat", "messages": [{"role": "user", "content": t} for t in texts]}


@pytest.mark.parametrize(("asked", "saved", "kind"), [
    ("what is the capital of France?", "What is the capital of France?",
     "letter case differs"),
    ("WHAT IS THE CAPITAL OF FRANCE?", "What is the capital of France?",
     "letter case differs"),
    ("What exactly is the capital of France?", "What is the capital of France?",
     "the request has a word more"),
    ("Please, what is the capital of France?", "What is the capital of France?",
     "the request has a word more, and letter case differs"),
    ("What is capital of France?", "What is the capital of France?",
     "the request lacks a word"),
    ("What is the capital of Spain?", "What is the capital of France?",
     "the text differs"),
    ("What is the capital of France? ", "What is the capital of France?",
     "whitespace differs at the end"),
    # a word is 256 characters at most: one longer is looked for no further (a miss
    # inside a long run of letters walked the whole prompt, seconds at the body cap)
    ("What is " + "x" * 256 + " the capital of France?", "What is the capital of France?",
     "the request has a word more"),
    ("What is " + "x" * 257 + " the capital of France?", "What is the capital of France?",
     "the text differs"),
    ("a" * 10**6 + "Y" + "a" * 10**6, "a" * 10**6 + "X" + "a" * 10**6, "the text differs"),
])
def test_the_kind_of_a_text_difference(asked: str, saved: str, kind: str) -> None:
    difference = first_difference(chat("Hi", asked), chat("Hi", saved))
    assert difference.place == "message 1 (user)" and difference.kind == kind
