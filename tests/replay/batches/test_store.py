"""The batch service without a server: each line answered by the Replayer exactly as the
request sent alone (the same bytes, the same counts), an unreplayable line its error in
its API's envelope, never a body; a refused input counted; the caps."""

from __future__ import annotations

import orjson
import pytest

from replay_server.errors import NotFound, PayloadTooLarge
from replay_server.index.samples import Rules
from replay_server.paths import CHAT_PATH, COMPLETION_PATH, MESSAGES_PATH, RESPONSES_PATH
from replay_server.replay.batches import AnthropicBatches, OpenAIBatches, Store
from replay_server.replay.replayer import Replayer
from tests.support import (
    MODEL,
    build,
    chat_record,
    chat_response,
    completion_record,
    completion_response,
    message_record,
    message_response,
    user,
)
from tests.web.test_http import responses_record

RECORDS = [chat_record("a?", chat_response("A", "A2"), line=1, n=2),
           chat_record("b?", chat_response("B"), line=2),
           chat_record("r?", chat_response("R1"), line=3, instance="i1"),
           chat_record("r?", chat_response("R2"), line=4, instance="i2"),
           message_record("m?", message_response("M"), line=5, max_tokens=9)]


def store(**caps: int) -> Store:
    return Store(Replayer(build(RECORDS), Rules(allow_ambiguous=True)),
                 caps.get("upload", 1 << 20), caps.get("held", 10))


def chat(text: str, **extra: object) -> bytes:
    return orjson.dumps({"model": MODEL, "messages": user(text), **extra})


def test_each_line_is_the_request_alone_byte_for_byte() -> None:
    alone, batched = store(), store()
    bodies = [chat("a?", n=2), chat("b?"), chat("r?"), chat("r?")]
    expected = [alone.replayer.handle(CHAT_PATH, b).body for b in bodies]
    outcomes = batched.answer(CHAT_PATH, [(str(i), b) for i, b in enumerate(bodies)], [])
    assert [o.body for o in outcomes] == expected  # (repeats in saved order, as alone)
    assert [o.status for o in outcomes] == [200] * 4
    status = batched.replayer.status()  # (read once: its uptime ticks between two reads)
    assert status == alone.replayer.status() | {"uptime_s": status["uptime_s"]}
    assert batched.replayer.stats.requests == 4 and batched.replayer.stats.in_flight() == 0


def test_a_line_that_cannot_be_replayed_is_its_error_counted() -> None:
    s = store()
    [missed, unknown] = s.answer(CHAT_PATH, [("x", chat("never saved")),
                                             ("y", orjson.dumps({"model": "no/such",
                                                                 "messages": user("b?")}))], [])
    assert (missed.status, orjson.loads(missed.body)["error"]["code"]) == (
        400, "replay_no_match")
    assert unknown.status == 404 and not unknown.ok
    assert s.replayer.stats.failed() == 2 and s.replayer.stats.in_flight() == 0


def test_an_anthropic_line_errs_in_anthropic_s_envelope() -> None:
    s = store()
    [out] = s.answer(MESSAGES_PATH, [("m", orjson.dumps(
        {"model": MODEL, "max_tokens": 9, "messages": user("other?")}))], [])
    assert orjson.loads(out.body)["type"] == "error"
    assert orjson.loads(out.body)["error"]["message"].startswith("replay_no_match")


def test_an_openai_input_that_cannot_be_read_fails_its_batch_and_is_counted() -> None:
    s = store()
    batches = OpenAIBatches(s)
    uploaded = batches.upload("in.jsonl", "batch", b"not json\n")
    batch = batches.create(orjson.dumps({"input_file_id": uploaded["id"], "endpoint":
                                         CHAT_PATH, "completion_window": "24h"}))
    assert batch["status"] == "failed" and batch["errors"]["data"][0]["line"] == 1
    assert s.replayer.stats.failed() == 1


def test_the_caps_are_413_and_deleting_makes_room() -> None:
    s = store(upload=200, held=1)
    with pytest.raises(PayloadTooLarge):
        s.add_file("big", "batch", b"x" * 201)
    first = s.add_file("a", "batch", b"{}")
    with pytest.raises(PayloadTooLarge, match="--max-batches"):
        s.add_file("b", "batch", b"{}")
    s.delete_file(first.id)
    s.add_file("b", "batch", b"{}")
    claude = AnthropicBatches(s)
    made = claude.create(orjson.dumps({"requests": [{"custom_id": "m", "params": {
        "model": MODEL, "max_tokens": 9, "messages": user("m?")}}]}), [], "http://h/")
    with pytest.raises(PayloadTooLarge):
        claude.create(orjson.dumps({"requests": [{"custom_id": "m", "params": {}}]}), [],
                      "http://h/")
    assert claude.delete(made["id"])["type"] == "message_batch_deleted"
    with pytest.raises(NotFound):
        claude.batch(made["id"], "http://h/")


def test_completions_and_responses_lines_are_answered_by_their_family() -> None:
    s = Store(Replayer(build([
        completion_record("p", completion_response(" q")), responses_record()]), Rules()),
        1 << 20, 10)
    alone = s.replayer  # (the same request sent alone afterwards)
    completion = orjson.dumps({"model": MODEL, "prompt": "p"})
    response = orjson.dumps({"model": MODEL, "input": "hi"})
    [c] = s.answer(COMPLETION_PATH, [("c", completion)], [])
    [r] = s.answer(RESPONSES_PATH, [("r", response)], [])
    assert c.body == alone.handle(COMPLETION_PATH, completion).body
    assert r.body == alone.handle(RESPONSES_PATH, response).body


def test_each_cap_says_what_frees_its_room() -> None:
    """Files and Anthropic's batches are deleted; OpenAI's API deletes no batch, so the
    only way on is a restart or a higher --max-batches, and the 413 says that."""
    s = store(held=1)
    s.add_file("a", "batch", b"{}")
    with pytest.raises(PayloadTooLarge, match=r"DELETE /v1/files/\{id\}"):
        s.add_file("b", "batch", b"{}")
    openai = OpenAIBatches(s)
    create = orjson.dumps({"input_file_id": next(iter(s.files)), "endpoint": CHAT_PATH,
                           "completion_window": "24h"})
    openai.create(create)
    with pytest.raises(PayloadTooLarge) as raised:
        openai.create(create)
    assert "restart" in raised.value.message and "DELETE" not in raised.value.message
    claude = AnthropicBatches(s)
    body = orjson.dumps({"requests": [{"custom_id": "m", "params": {}}]})
    claude.create(body, [], "http://h/")
    with pytest.raises(PayloadTooLarge, match=r"DELETE /v1/messages/batches/\{id\}"):
        claude.create(body, [], "http://h/")
