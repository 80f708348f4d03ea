"""inspect_ai logs of `anthropic/` models: each model call's raw Messages request and the
SDK's dump of the message, read as /v1/messages records and served to the anthropic SDK.
(tests/harnesses/test_anthropic.py rescores a log inspect_ai wrote itself.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import pytest

from replay_server.index.loading import load
from replay_server.paths import MESSAGES_PATH
from tests.saved.formats.test_inspect_ai import edited, model_events, records
from tests.support import serving

CLAUDE = "claude-test"
DUMP = {"id": "msg_01", "type": "message", "role": "assistant", "model": CLAUDE,
        "content": [{"type": "thinking", "thinking": "6 + 7 = 13", "signature": "EqSig=="},
                    {"type": "text", "text": "The answer is 13.", "citations": None}],
        "stop_reason": "end_turn", "stop_sequence": None, "container": None,
        "usage": {"input_tokens": 20, "output_tokens": 9, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "cache_creation": None,
                  "server_tool_use": None, "service_tier": "standard"}}
SENT: Any = {"model": CLAUDE, "max_tokens": 2048, "system": "Be careful.",
             "thinking": {"type": "enabled", "budget_tokens": 1024},
             "messages": [{"role": "user", "content": [{"type": "text", "text": "6 + 7?"}]}]}


def claude_call(samples: dict[str, Any], _: Any) -> None:
    """The first call of q1 as inspect's anthropic provider logs it."""
    call = model_events(samples["q1"])[0]["call"]
    call.pop("call_refs", None)
    call["request"] = {**SENT, "extra_headers": {"anthropic-beta": "interleaved-thinking",
                                                  "x-irid": "abc123"}}
    call["response"] = DUMP


@pytest.mark.http
def test_an_anthropic_call_is_a_messages_record_served_to_the_sdk(tmp_path: Path) -> None:
    path = edited(tmp_path, "arith_json", claude_call)
    claude = [r for r in records(path) if r.endpoint == MESSAGES_PATH]
    assert len(claude) == 1 and claude[0].model == CLAUDE
    assert claude[0].request == {**SENT, "anthropic-beta": "interleaved-thinking"}
    assert claude[0].response == DUMP and claude[0].unusable is None
    assert load([path], progress=False).index.models[CLAUDE].records == 1
    with serving([path]) as url, anthropic.Anthropic(base_url=url.removesuffix("/v1"),
                                                     api_key="x") as client:
        betas = {"anthropic-beta": "interleaved-thinking"}
        raw = client.messages.with_raw_response.create(**SENT, extra_headers=betas)
        assert raw.http_response.json() == DUMP  # as saved, signature included
        got = raw.parse()
        with client.messages.stream(**SENT, extra_headers=betas) as stream:
            final = stream.get_final_message()
        assert [b.to_dict() for b in final.content] == [b.to_dict() for b in got.content]
        with pytest.raises(anthropic.BadRequestError, match="replay_no_match"):
            client.messages.create(**SENT)  # the beta header is part of what was sent


def test_a_failed_anthropic_call_is_unusable(tmp_path: Path) -> None:
    def failed(samples: dict[str, Any], data: Any) -> None:
        claude_call(samples, data)
        event = model_events(samples["q1"])[0]
        event["error"] = "Error code: 529 - overloaded"
        event["call"].update(error=True, response={"type": "error", "error": {
            "type": "overloaded_error", "message": "Overloaded"}})

    claude = [r for r in records(edited(tmp_path, "arith_json", failed))
              if r.endpoint == MESSAGES_PATH]
    assert len(claude) == 1 and claude[0].response is None
    assert claude[0].unusable == "the saved model call failed: Error code: 529 - overloaded"
