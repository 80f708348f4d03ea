"""Where a Gemini prompt first differs from the nearest saved one: content, role and
character of its conversation, else the key field that differs."""

from __future__ import annotations

from typing import Any

from replay_server.paths import GEMINI_PATH
from replay_server.wire.families import family_of

FAMILY = family_of(GEMINI_PATH)


def prompt(*texts: str, **fields: Any) -> dict[str, Any]:
    contents = [{"role": "user" if i % 2 == 0 else "model", "parts": [{"text": t}]}
                for i, t in enumerate(texts)]
    (found,) = FAMILY.prompts({"contents": contents, **fields}, None) or []
    return found


def test_a_changed_text_says_where() -> None:
    found = FAMILY.difference(prompt("Hi.", "Hello!", "What is 2 + 2?"),
                              prompt("Hi.", "Hello!", "What is 2 + 3?"))
    assert found.describe() == "content 2 (user), character 12: the text differs"
    assert found.describe(quote=True).endswith('(requested "What is 2 + 2?" vs saved '
                                               '"What is 2 + 3?")')


def test_a_missing_turn_and_a_changed_field_say_which() -> None:
    assert FAMILY.difference(prompt("Hi."), prompt("Hi.", "Hello!", "Bye.")).describe() == \
        "content 1 (model): missing at the end of the request"
    changed = FAMILY.difference(
        prompt("Hi.", generationConfig={"responseMimeType": "application/json"}),
        prompt("Hi.")).describe()
    assert changed == "field generationConfig.responseMimeType: set in the request, not saved"
