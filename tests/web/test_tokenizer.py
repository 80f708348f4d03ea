"""vLLM's tokenizer endpoints on a real server: recorded through the real recorder from a
fake vLLM and replayed identically, computed with --tokenizer, and, when neither can
answer, a 404 in the OpenAI envelope that is counted apart from the generations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer

from replay_server.saved.writer import RecordWriter
from replay_server.settings import Settings
from replay_server.web.recorder import Recorder, create_record_app
from tests.fakemodel.server import create_app as fake_model
from tests.support import (
    MODEL,
    assert_error,
    chat_record,
    chat_response,
    running,
    serving,
    tokenizer_record,
    write_jsonl,
)

pytestmark = pytest.mark.http
TOKENIZER = Path(__file__).parents[1] / "data" / "gen" / "tokenizer_bpe"
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
# (method, path, body): what harnesses send (olmo-eval's RemoteTokenizer names the model
# and add_special_tokens; lm-eval's probe names neither)
CALLS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/tokenize", {"model": "tiny-model", "prompt": "Hello", "add_special_tokens": True}),
    ("POST", "/tokenize", {"prompt": "Hello"}),
    ("POST", "/tokenize", {"model": "tiny-model", "prompt": "Hello", "return_token_strs": True}),
    ("POST", "/tokenize", {"model": "tiny-model", "messages": CHAT}),
    ("POST", "/tokenize", {"model": "tiny-model", "messages": CHAT,
                           "add_generation_prompt": False}),
    ("POST", "/detokenize", {"model": "tiny-model", "tokens": [1, 328, 357]}),
    ("GET", "/tokenizer_info", None),
]


def root(url: str) -> str:
    return url.removesuffix("/v1")


def answers(base: str) -> list[tuple[int, Any]]:
    with httpx.Client(base_url=base) as client:
        return [(r.status_code, r.json()) for r in
                (client.request(m, p, json=b) for m, p, b in CALLS)]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "run.jsonl", [
        chat_record("q", chat_response("a")),
        tokenizer_record("/tokenize", {"model": MODEL, "prompt": "Hello"},
                         {"count": 1, "max_model_len": 8192, "tokens": [9],
                          "token_strs": None}, line=2)])


def test_record_then_replay_gives_identical_tokenizer_answers(tmp_path: Path) -> None:
    with running(fake_model(["tiny-model"])) as upstream:
        rec = Recorder(upstream, RecordWriter(tmp_path / "run.jsonl"))
        with running(create_record_app(rec)) as url:
            original = answers(root(url))
            httpx.post(f"{url}/chat/completions", json={"model": "tiny-model",
                                                        "messages": CHAT}).raise_for_status()
        rec.writer.close()
    assert [status for status, _ in original] == [200] * len(CALLS)
    assert rec.counts["recorded"] == len(CALLS) + 1
    # the first two are one request to vLLM (the model and the default are not key)
    assert original[0] == original[1] and original[3] != original[4]
    with serving([tmp_path / "run.jsonl"]) as replay:
        assert answers(root(replay)) == original
        models = httpx.get(f"{replay}/models").json()["data"]
        status = httpx.get(f"{root(replay)}/replay/status").json()
    assert models[0]["max_model_len"] == 4096  # as the recorded answers said
    assert status["tokenizer"] == {"recorded": len(CALLS), "computed": 0, "unanswered": 0}


def test_an_unanswered_call_is_a_404_envelope_counted_apart(saved: Path) -> None:
    with serving([saved]) as url, httpx.Client(base_url=root(url)) as client:
        assert client.post("/tokenize", json={"prompt": "Hello"}).json()["tokens"] == [9]
        error = assert_error(client.post("/tokenize", json={"prompt": "Bye"}), 404,
                             "tokenizer_unanswered")
        assert "No saved generation is affected" in error["message"]
        assert_error(client.post("/detokenize", json={"tokens": [1]}), 404,
                     "tokenizer_unanswered")
        assert_error(client.get("/tokenizer_info"), 404, "tokenizer_unanswered")
        assert_error(client.post("/tokenize", json={"prompt": 3}), 400, param="prompt")
        assert_error(client.post("/tokenize", json={"model": "no/such", "prompt": "x"}), 404)
        assert_error(client.get("/tokenize"), 405)
        assert_error(client.post("/v1/tokenize", json={"prompt": "x"}), 404)  # not vLLM's
        status = client.get("/replay/status").json()
    assert status["tokenizer"] == {"recorded": 1, "computed": 0, "unanswered": 5}
    assert status["totals"]["hits"] == 0 and status["rejected"] == {"404": 1}  # /v1/tokenize


def test_tokenize_and_detokenize_are_computed_with_the_tokenizer(saved: Path) -> None:
    backend = Tokenizer.from_file(str(TOKENIZER / "tokenizer.json"))
    text = "What is 2 + 3?"
    with serving([saved], Settings(tokenizer=str(TOKENIZER))) as url, \
            httpx.Client(base_url=root(url)) as client:
        tokenized = client.post("/tokenize", json={"model": MODEL, "prompt": text}).json()
        decoded = client.post("/detokenize", json={"tokens": tokenized["tokens"]}).json()
        recorded = client.post("/tokenize", json={"prompt": "Hello"}).json()
        assert_error(client.post("/tokenize", json={"messages": CHAT}), 404,
                     "tokenizer_unanswered")  # a chat template is never guessed
    ids = backend.encode(text).ids
    assert tokenized == {"count": len(ids), "max_model_len": 8192, "tokens": ids,
                         "token_strs": None}
    assert decoded == {"prompt": backend.decode(ids, skip_special_tokens=False)}
    assert recorded["tokens"] == [9]  # a recording wins


def test_a_call_naming_no_model_to_a_server_of_several_is_forwarded_not_saved(
        tmp_path: Path) -> None:
    with running(fake_model(["a", "b"])) as upstream:
        rec = Recorder(upstream, RecordWriter(tmp_path / "run.jsonl"))
        with running(create_record_app(rec)) as url:
            unnamed = httpx.post(f"{root(url)}/tokenize", json={"prompt": "Hi"})
            named = httpx.post(f"{root(url)}/tokenize", json={"model": "b", "prompt": "Hi"})
        rec.writer.close()
    assert unnamed.status_code == named.status_code == 200  # the client gets its answer
    assert (rec.counts["recorded"], rec.counts["unrecordable"]) == (1, 1)
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    assert len(lines) == 1 and '"model":"b"' in lines[0]


def test_a_recorded_model_list_gives_max_model_len_and_no_model_of_its_own(
        tmp_path: Path) -> None:
    """The replay's /v1/models says a model's max_model_len as the recorded list said it;
    a model the list named but no request used is not served (a request naming no model
    still selects the one that answered)."""
    with running(fake_model(["tiny-model", "other-model"])) as upstream:
        rec = Recorder(upstream, RecordWriter(tmp_path / "run.jsonl"))
        with running(create_record_app(rec)) as url:
            assert httpx.get(f"{url}/models").status_code == 200
            httpx.post(f"{url}/chat/completions", json={"model": "tiny-model",
                                                        "messages": CHAT}).raise_for_status()
        rec.writer.close()
    assert rec.counts["records"] == 3  # two models listed, one chat
    with serving([tmp_path / "run.jsonl"]) as replay:
        models = httpx.get(f"{replay}/models").json()["data"]
        answer = httpx.post(f"{replay}/chat/completions", json={"messages": CHAT})
    assert [(m["id"], m["max_model_len"]) for m in models] == [("tiny-model", 4096)]
    assert answer.status_code == 200
