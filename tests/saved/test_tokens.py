"""replay_server.tokens against lm-eval's own code (issue 16).

Every claim is checked with lm-eval itself: its `LocalCompletionsAPI` (tokenizer loaded by
transformers from the same folder) runs `loglikelihood` and `generate_until` against a
stand-in for `requests.post` that answers from ids computed by replay_server.tokens and
responses built by `loglikelihood_choice`; its `parse_logprobs` reads the built choices; and
the saved runs in tests/data/lm_eval (loglikelihood_mc, mc_tokenized, tokenized_gen) show
that the ids lm-eval really sent are the ones computed from the samples files.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from replay_server.saved import tokens
from replay_server.saved.local_tokenizer import LocalTokenizer, load_tokenizer
from replay_server.saved.tokens import (
    NotRepresentable,
    encode_like_lm_eval,
    encode_pair,
    loglikelihood_choice,
    loglikelihood_input,
)
from tests.saved.support import BPE, DATA, TEXTS, WORDLEVEL

pytestmark = pytest.mark.harness  # lm-eval, transformers, litellm's tokenizer files


def lm_eval(module: str) -> Any:
    """lm-eval's `module`, imported by the test that uses it: without the harness extra
    this file is still collected (and its tests deselected by their marker)."""
    return importlib.import_module("lm_eval." + module)


def parse_logprobs(**kwargs: Any) -> Any:
    return lm_eval("models.openai_completions").LocalCompletionsAPI.parse_logprobs(**kwargs)


LM = DATA / "lm_eval"


def test_decode_equals_transformers_batch_decode(folders: dict[str, Path],
                                                 toks: dict[str, LocalTokenizer]
                                                 ) -> None:
    import transformers
    for name in ("wordlevel", "bpe", "deepseek"):
        if name not in folders:
            continue
        ref = transformers.AutoTokenizer.from_pretrained(str(folders[name]))
        ids = [toks[name].encode(t, add_special_tokens=True) for t in TEXTS]
        assert [tokens.decode_like_lm_eval(toks[name], i) for i in ids] == ref.batch_decode(ids)


# --------------------------------------------------------------------------- lm-eval, live


class Reply:
    def __init__(self, body: dict[str, Any]):
        self.ok, self._body = True, body

    def raise_for_status(self) -> None:
        pass

    def json(self) -> dict[str, Any]:
        return self._body


class ReplayStandIn:
    """What replay-server will do, in miniature: an index from what replay_server.tokens
    computes for the saved requests, answering lm-eval's POSTs (through orjson, as the
    server serialises). Records every body it got."""

    def __init__(self, tok: LocalTokenizer) -> None:
        self.tok = tok
        self.loglikelihood: dict[Any, tuple[list[int], int, float, bool]] = {}
        self.generation: dict[Any, str] = {}
        self.bodies: list[dict[str, Any]] = []

    def save_loglikelihood(self, ids: list[int], ctxlen: int, logprob: float, greedy: bool,
                           text: bool = False) -> None:
        key: Any = tokens.decode_like_lm_eval(self.tok, ids) if text else tuple(ids)
        old = self.loglikelihood.setdefault(key, (ids, ctxlen, logprob, greedy))
        assert old == (ids, ctxlen, logprob, greedy), "two saved answers for one request"

    def post(self, url: str, json: dict[str, Any], **_: Any) -> Reply:
        self.bodies.append(json)
        prompts = json["prompt"] if isinstance(json["prompt"], list) else [json["prompt"]]
        if json.get("echo"):
            assert {k: v for k, v in json.items() if k != "prompt"} == {
                "model": "m", "temperature": 0, "max_tokens": 1, "logprobs": 1,
                "seed": 1234, "echo": True}
            choices = []
            for i, p in enumerate(prompts):
                ids, ctxlen, lp, greedy = self.loglikelihood[
                    tuple(p) if isinstance(p, list) else p]
                choices.append(loglikelihood_choice(ids, ctxlen, lp, greedy,
                                                    tokenizer=self.tok, index=i))
        else:
            choices = [{"index": i, "text": self.generation[tuple(p)], "logprobs": None,
                        "finish_reason": "stop"} for i, p in enumerate(prompts)]
        body = {"id": "cmpl-x", "object": "text_completion", "model": "m", "choices": choices}
        return Reply(orjson.loads(orjson.dumps(body)))


@pytest.fixture(scope="module")
def lm_eval_models(folders: dict[str, Path]) -> Callable[..., Any]:
    """LocalCompletionsAPI instances (transformers loads each tokenizer folder once)."""
    cache: dict[tuple[Any, ...], Any] = {}

    def make(name: str, **model_args: Any) -> Any:
        key = (name, tuple(sorted(model_args.items())))
        if key not in cache:
            cache[key] = lm_eval("models.openai_completions").LocalCompletionsAPI(
                model="m", base_url="http://127.0.0.1:9/v1/completions",
                tokenizer=str(folders[name]), tokenizer_backend="huggingface", **model_args)
        return cache[key]

    return make


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[LocalTokenizer],
                                                                    ReplayStandIn]]:
    made: list[ReplayStandIn] = []

    def install(tok: LocalTokenizer) -> ReplayStandIn:
        server = ReplayStandIn(tok)
        monkeypatch.setattr(lm_eval("models.api_models").requests, "post", server.post)
        made.append(server)
        return server

    yield install


def _instances(kind: str, args: list[tuple[Any, ...]]) -> list[Any]:
    instance = lm_eval("api.instance").Instance
    return [instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args)]


def _saved_value(i: int) -> tuple[float, bool]:
    """Distinct, awkward saved values: multi-token sums, tiny and huge magnitudes, 0."""
    values = [-6.5920000000000005, -0.05, -1e-300, 0.0, -1234.5678901234567, -5e-324,
              -3.8627, -0.1 - 0.2]
    return values[i % len(values)], i % 3 == 1


Q4, Q7 = "Question: What is 4 + 5?\nAnswer:", "Question: What is 7 * 3?\nAnswer:"
PAIRS = [(Q4, " 9"), (Q4 + " ", "9"), (Q4 + "\n", "10"), (Q7, " 21"), ("", " 9"), ("", "9"),
         ("What is 123456 + 7?", " 123463 and more"),
         ("Ünïcödé  \u3000", "漢字"), ("x", "")]


@pytest.mark.parametrize(("name", "model_args"), [
    ("wordlevel", {}),
    ("bpe", {}),
    ("bpe", {"add_bos_token": True}),
    ("bpe", {"add_bos_token": True, "max_length": 9, "batch_size": 3}),
    ("bpe_add_eos", {"add_bos_token": True}),
    ("bpe", {"custom_prefix_token_id": 2, "batch_size": 5}),
    ("deepseek", {"add_bos_token": True, "batch_size": 4}),
    ("anthropic", {"batch_size": 2}),
])
def test_lm_eval_loglikelihood_reads_back_the_saved_values(
        name: str, model_args: dict[str, Any], toks: dict[str, LocalTokenizer],
        lm_eval_models: Callable[..., Any],
        stand_in: Callable[[LocalTokenizer], ReplayStandIn]) -> None:
    """lm-eval's loglikelihood() end to end: the ids it sends are keyed by encode_pair +
    loglikelihood_input, and it gets back exactly the saved (logprob, is_greedy)."""
    if name not in toks:
        pytest.skip(f"{name}: litellm (a test extra) is not installed")
    tok, lm = toks[name], lm_eval_models(name, **model_args)
    server = stand_in(tok)
    add_bos, max_length = model_args.get("add_bos_token", False), model_args.get("max_length",
                                                                                   2048)
    pairs, saved = [], []
    for i, (ctx, cont) in enumerate(PAIRS):
        c, x = encode_pair(tok, ctx, cont, add_bos_token=add_bos,
                           custom_prefix_token_id=model_args.get("custom_prefix_token_id"))
        ids, ctxlen = loglikelihood_input(c, x, max_length=max_length)
        if ctxlen <= 0:
            continue  # the cut ate the context: lm-eval's parser asserts ctxlen > 0
        value = _saved_value(i) if ids[ctxlen:] else (0, True)
        if tuple(ids) in server.loglikelihood:
            continue  # same ids as an earlier pair here (e.g. WordLevel drops whitespace)
        server.save_loglikelihood(ids, ctxlen, *value)
        pairs.append((ctx, cont))
        saved.append(value)
    assert len(pairs) >= 4
    got = lm.loglikelihood(_instances("loglikelihood", pairs), disable_tqdm=True)
    assert got == saved
    assert [type(v) for v, _ in got] == [type(v) for v, _ in saved]
    sent = [p for b in server.bodies for p in b["prompt"]]
    assert sorted(map(tuple, sent)) == sorted(server.loglikelihood)


@pytest.mark.parametrize("name", ["wordlevel", "bpe"])
def test_lm_eval_loglikelihood_with_text_prompts(
        name: str, toks: dict[str, LocalTokenizer], lm_eval_models: Callable[..., Any],
        stand_in: Callable[[LocalTokenizer], ReplayStandIn]) -> None:
    """tokenized_requests=False: lm-eval sends the decoded ids; decode_like_lm_eval keys them."""
    tok, lm = toks[name], lm_eval_models(name, tokenized_requests=False, batch_size=2)
    server = stand_in(tok)
    pairs = [(Q4, " 9"), (Q4, " 10"), (Q7 + " ", "21"), (Q7, " 24")]
    saved = [_saved_value(i) for i in range(len(pairs))]
    for (ctx, cont), value in zip(pairs, saved, strict=True):
        ids, ctxlen = loglikelihood_input(*encode_pair(tok, ctx, cont))
        server.save_loglikelihood(ids, ctxlen, *value, text=True)
    if len(server.loglikelihood) < len(pairs):
        pytest.skip("two pairs decode to one text with this tokenizer")
    assert lm.loglikelihood(_instances("loglikelihood", pairs), disable_tqdm=True) == saved
    assert all(isinstance(p, str) for b in server.bodies for p in b["prompt"])


@pytest.mark.parametrize(("name", "model_args", "gen_kwargs"), [
    ("wordlevel", {"batch_size": 4}, {"until": ["\n\n"], "max_gen_toks": 32}),
    ("bpe", {"add_bos_token": True}, {"until": ["\n\n"]}),
    ("bpe", {"add_bos_token": True, "max_length": 20, "max_gen_toks": 12, "batch_size": 2},
     {"until": ["\n\n"]}),
    ("bpe", {"max_length": 40, "batch_size": 3}, {"until": ["\n\n"], "max_gen_toks": 30}),
    ("deepseek", {"add_bos_token": True, "max_length": 30, "max_gen_toks": 22}, {}),
])
def test_lm_eval_generation_ids_are_encode_like_lm_eval(
        name: str, model_args: dict[str, Any], gen_kwargs: dict[str, Any],
        toks: dict[str, LocalTokenizer], lm_eval_models: Callable[..., Any],
        stand_in: Callable[[LocalTokenizer], ReplayStandIn]) -> None:
    """generate_until with token ids (the default): each prompt is encode_like_lm_eval of the
    context, including BOS and the left cut to max_length - 1 - max_gen_toks."""
    if name not in toks:
        pytest.skip(f"{name}: litellm (a test extra) is not installed")
    tok, lm = toks[name], lm_eval_models(name, **model_args)
    server = stand_in(tok)
    contexts = ["Question: What is 12 + 7?\nAnswer:", "Question: What is 9 * 8?\nAnswer: ",
                "Q: 1+1=?", "Ünïcödé  \u3000 what is 123456 + 7?\nA:", "x"]
    max_gen_toks = gen_kwargs.get("max_gen_toks", model_args.get("max_gen_toks", 256))
    for i, ctx in enumerate(contexts):
        ids = encode_like_lm_eval(tok, ctx, add_bos_token=model_args.get("add_bos_token", False),
                                  max_length=model_args.get("max_length", 2048),
                                  max_gen_toks=max_gen_toks)
        server.generation[tuple(ids)] = f" answer {i}"
    got = lm.generate_until(_instances("generate_until", [(c, dict(gen_kwargs))
                                                          for c in contexts]), disable_tqdm=True)
    assert got == [f" answer {i}" for i in range(len(contexts))]
    assert all(isinstance(p, list) for b in server.bodies for p in b["prompt"])


_text = st.lists(st.sampled_from(list("ab 1\n\t.:?Ü漢\u3000") + ["  ", "12", " 9", "Answer:"]),
                 max_size=8).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(ctx=_text, cont=_text, add_bos=st.booleans())
def test_encode_pair_equals_lm_eval_on_any_text(ctx: str, cont: str, add_bos: bool,
                                                toks: dict[str, LocalTokenizer],
                                                lm_eval_models: Callable[..., Any]) -> None:
    """Random contexts and continuations (whitespace at the boundary, digits that BPE merges
    across it): encode_pair == what lm-eval's loglikelihood() hands to _loglikelihood_tokens."""
    tok, lm = toks["bpe"], lm_eval_models("bpe", add_bos_token=add_bos)
    if ctx == "":
        assume(tok.encode(cont, add_special_tokens=add_bos))
    seen: list[Any] = []

    def scored(requests: list[Any], **_: Any) -> list[tuple[float, bool]]:
        seen.extend(requests)
        return [(0.0, True)]

    lm._loglikelihood_tokens = scored
    try:
        lm.loglikelihood(_instances("loglikelihood", [(ctx, cont)]), disable_tqdm=True)
    finally:
        del lm._loglikelihood_tokens
    assert encode_pair(tok, ctx, cont, add_bos_token=add_bos) == (seen[0][1], seen[0][2])


# --------------------------------------------------------------------------- the choice


def _lm_eval_reads(choice: dict[str, Any], ctxlen: int) -> tuple[float, bool]:
    wire = orjson.loads(orjson.dumps({"choices": [choice]}))  # as the server sends it
    [got] = parse_logprobs(outputs=wire, tokens=None, ctxlens=[ctxlen])
    assert got == tokens.parse_like_lm_eval(wire["choices"][0], ctxlen)
    return got  # type: ignore[no-any-return]


@settings(max_examples=300, deadline=None)
@given(logprob=st.floats(allow_nan=False, allow_infinity=False, max_value=0.0) | st.sampled_from(
           [-0.0, -5e-324, -1.7976931348623157e308, 0.1 + 0.2, -6.5920000000000005]),
       greedy=st.booleans(), n_ctx=st.integers(1, 6), n_cont=st.integers(1, 5),
       max_tokens=st.sampled_from([0, 1]))
def test_lm_eval_parses_exactly_the_saved_values(logprob: float, greedy: bool, n_ctx: int,
                                                 n_cont: int, max_tokens: int) -> None:
    ids = list(range(100, 100 + n_ctx + n_cont))
    try:
        choice = loglikelihood_choice(ids, n_ctx, logprob, greedy, max_tokens=max_tokens)
    except NotRepresentable:
        assert max_tokens == 0 and n_cont == 1  # [:-1] drops the only continuation token
        return
    got = _lm_eval_reads(choice, n_ctx)
    assert got == (logprob, greedy)
    assert math.fsum(choice["logprobs"]["token_logprobs"][n_ctx:-1]) == logprob  # any summation
    assert len(choice["logprobs"]["tokens"]) == len(ids) + max_tokens
    assert choice["logprobs"]["text_offset"][-1] == len(choice["text"]) - len(
        choice["logprobs"]["tokens"][-1])


def test_choice_shape(toks: dict[str, LocalTokenizer]) -> None:
    tok = toks["bpe"]
    ids, ctxlen = loglikelihood_input(*encode_pair(tok, "Question: What is 4 + 5?\nAnswer:",
                                                   " 10", add_bos_token=True))
    choice = loglikelihood_choice(ids, ctxlen, -2.5, False, tokenizer=tok, index=3)
    lp = choice["logprobs"]
    assert choice["index"] == 3 and choice["finish_reason"] == "length"
    assert lp["tokens"][:2] == ["<s>", "Question"] and lp["tokens"][-1] == ""
    assert choice["text"] == "".join(lp["tokens"])
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["token_logprobs"][ctxlen] == -2.5
    assert lp["top_logprobs"][ctxlen] == {" 10": -2.5, tokens.UNKNOWN_GREEDY: -2.4999999999999996}
    assert all(v == 0.0 for i, v in enumerate(lp["token_logprobs"]) if i not in (0, ctxlen))


def test_what_cannot_be_replayed() -> None:
    ids = [5, 6, 7]
    with pytest.raises(NotRepresentable, match="not finite"):
        loglikelihood_choice(ids, 2, -math.inf, False)
    with pytest.raises(NotRepresentable, match="max_tokens 5"):
        loglikelihood_choice(ids, 2, -1.0, True, max_tokens=5)
    with pytest.raises(NotRepresentable, match="scored"):
        loglikelihood_choice(ids, 2, -1.0, True, max_tokens=0)  # [:-1] drops token 7
    with pytest.raises(NotRepresentable, match="scored"):
        loglikelihood_choice(ids, 3, -1.0, True)  # nothing after the context
    assert _lm_eval_reads(loglikelihood_choice(ids, 3, 0, True), 3) == (0, True)
    with pytest.raises(ValueError, match="ctxlen 0"):
        loglikelihood_choice(ids, 0, -1.0, True)


def test_saved_loglikelihood() -> None:
    assert tokens.saved_loglikelihood(["-3.8627", "False"]) == (-3.8627, False)
    assert tokens.saved_loglikelihood(["-6.5920000000000005", "True"]) == (-6.5920000000000005,
                                                                           True)
    for bad in (["-1", "false"], [-1.0, "True"], ["x", "True"], ["-1"], "-1,True"):
        with pytest.raises(ValueError, match="expected"):
            tokens.saved_loglikelihood(bad)


def test_lm_eval_cuts_like_this() -> None:
    """The slicing corner cases mirrored as lm-eval writes them."""
    assert loglikelihood_input([1, 2, 3], [4, 5], max_length=5) == ([2, 3, 4, 5], 2)
    assert loglikelihood_input([1, 2, 3], [4, 5], max_length=2048) == ([1, 2, 3, 4, 5], 3)
    tok = load_tokenizer(WORDLEVEL)
    ids = tok.encode("Question: What is 4 + 5?\nAnswer:", add_special_tokens=False)
    assert encode_like_lm_eval(tok, "Question: What is 4 + 5?\nAnswer:", max_length=10,
                               max_gen_toks=4) == ids[-5:]
    assert encode_like_lm_eval(tok, "Question: What is 4 + 5?\nAnswer:", max_length=5,
                               max_gen_toks=4) == ids  # a cut of 0 keeps all (ids[-0:])
    assert tokens.was_truncated(tok, "Question: What is 4 + 5?\nAnswer:", max_length=10,
                                max_gen_toks=4)


# --------------------------------------------------------------------------- saved runs


def _case(case: str) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]],
                              dict[str, Any]]:
    samples = {}
    for path in sorted((LM / case).glob("*/samples_*.jsonl")):
        task = path.name[len("samples_"):].rsplit("_", 1)[0]
        samples[task] = [json.loads(line) for line in path.read_text().splitlines()]
    wire = [json.loads(line) for line in (LM / case / "wire.jsonl").read_text().splitlines()]
    results = json.loads(next((LM / case).glob("*/results_*.json")).read_text())
    return samples, wire, results["config"]["model_args"]


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


@pytest.mark.parametrize(("case", "tokenizer"), [("loglikelihood_mc", WORDLEVEL),
                                                 ("mc_tokenized", BPE)])
def test_saved_multiple_choice_runs(case: str, tokenizer: Path) -> None:
    """The real runs: every wire prompt is loglikelihood_input(encode_pair(arguments)) with
    the run's model_args (add_bos_token, max_length), and for every wire request the
    response built from the samples file makes lm-eval's parser read back every saved
    value. mc_tokenized: BPE, BOS, a context ending in a space, empty contexts, cut requests,
    and one batch that sends the same ids twice (arith_mc and arith_mc_ws agree)."""
    samples, wire, model_args = _case(case)
    tok = load_tokenizer(tokenizer)
    add_bos = _flag(model_args.get("add_bos_token", False))
    max_length = int(model_args.get("max_length", 2048))
    index: dict[tuple[int, ...], tuple[int, float, bool]] = {}
    where: dict[tuple[int, ...], list[str]] = {}
    cut = empty = 0
    for task, rows in samples.items():
        for row in rows:
            for name, args in row["arguments"].items():
                pair = encode_pair(tok, args["arg_0"], args["arg_1"], add_bos_token=add_bos)
                ids, ctxlen = loglikelihood_input(*pair, max_length=max_length)
                value = tokens.saved_loglikelihood(row["resps"][int(name[9:])][0])
                old = index.setdefault(tuple(ids), (ctxlen, *value))
                assert old == (ctxlen, *value), "one id list, two saved answers"
                where.setdefault(tuple(ids), []).append(f"{task}:{row['doc_id']}:{name}")
                cut += len(ids) < len(pair[0]) + len(pair[1])
                empty += args["arg_0"] == ""
    sent = [tuple(p) for w in wire for p in w["request"]["prompt"]]
    assert set(sent) == set(index)  # every request lm-eval sent, and nothing else
    for w in wire:
        request = w["request"]
        assert request["echo"] is True and request["max_tokens"] == 1
        prompts = [tuple(p) for p in request["prompt"]]
        built = {"choices": [loglikelihood_choice(list(p), index[p][0], index[p][1],
                                                  index[p][2], tokenizer=tok, index=i)
                             for i, p in enumerate(prompts)]}
        built = orjson.loads(orjson.dumps(built))
        ctxlens = [index[p][0] for p in prompts]
        assert parse_logprobs(outputs=built, tokens=prompts, ctxlens=ctxlens) == [
            index[p][1:] for p in prompts]
        # and the real server's response reads the same
        assert parse_logprobs(outputs=w["response"], tokens=prompts, ctxlens=ctxlens) == [
            index[p][1:] for p in prompts]
    if case == "mc_tokenized":
        assert cut and empty and len(sent) > len(set(sent))
        assert any(len(v) > 1 for v in where.values())


def test_saved_generation_run_sent_encode_like_lm_eval() -> None:
    """tokenized_gen: local-completions generate_until with token ids; every wire prompt is
    encode_like_lm_eval(arg_0) and its answer is the saved resps."""
    samples, wire, model_args = _case("tokenized_gen")
    tok = load_tokenizer(WORDLEVEL)
    answers = {tuple(p): w["response"]["choices"][i]["text"]
               for w in wire for i, p in enumerate(w["request"]["prompt"])}
    assert len(answers) == len(samples["arith_gen"]) == 6
    for row in samples["arith_gen"]:
        args = row["arguments"]["gen_args_0"]
        ids = encode_like_lm_eval(
            tok, args["arg_0"], add_bos_token=_flag(model_args.get("add_bos_token", False)),
            max_length=int(model_args.get("max_length", 2048)),
            max_gen_toks=int(args["arg_1"].get("max_gen_toks",
                                               model_args.get("max_gen_toks", 256))))
        assert answers[tuple(ids)] == row["resps"][0][0]
    assert all(len(w["request"]["prompt"]) in (4, 2) for w in wire)  # batch_size 4


def test_sum_is_builtin_sum() -> None:
    """lm-eval sums with the builtin sum (Python >= 3.12: compensated); the choice puts one
    non-zero value in the slice so any summation gives it back."""
    assert builtins.sum([0.0, -6.5920000000000005, 0.0, 0.0]) == -6.5920000000000005
