"""The error of a miss: the nearest saved prompt and where the request first differs."""

from __future__ import annotations

import orjson
import pytest

from replay_server import errors
from replay_server.index.samples import Rules
from replay_server.paths import CHAT_PATH
from replay_server.replay.replayer import Replayer
from tests.support import MODEL, build, chat_record, chat_response, user

SAVED = [chat_record(f"Question {i}: what is {i} times {i + 3}?", chat_response(str(i)),
                     line=i + 1) for i in range(500)]
SAVED.append(chat_record("Name the capital of France.", chat_response("Paris"), line=600))
SAVED.append(chat_record("name three rivers of Europe.", chat_response("Rhine"), line=601))


@pytest.mark.parametrize(("asked", "where"), [
    ("name the capital of France.", "character 0: letter case differs"),
    ("NAME THE CAPITAL OF FRANCE.", "character 1: letter case differs"),
    ("Now name the capital of France.",
     "character 1: the request has a word more, and letter case differs"),
])
def test_a_miss_is_paired_with_the_prompt_it_drifted_from(asked: str, where: str) -> None:
    """Not with `name three rivers...`, which shares more bytes before the difference."""
    r = Replayer(build(SAVED), Rules())
    with pytest.raises(errors.NoMatch) as miss:
        r.handle(CHAT_PATH, orjson.dumps({"model": MODEL, "messages": user(asked)}))
    assert miss.value.detail["nearest"] == "saved.jsonl:600"
    assert miss.value.detail["difference"] == f"message 0 (user), {where}"
    assert f"Nearest saved prompt: saved.jsonl:600; first difference: message 0 (user), " \
        f"{where}." in miss.value.message
