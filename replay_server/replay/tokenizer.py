"""vLLM's tokenizer endpoints, answered: from a recorded exchange, else computed with the
run's tokenizer (`--tokenizer`), else *unanswered*. No HTTP framework in here.

A tokenizer answer never carries a generation: a harness reads it for token counts
(olmo-eval's metrics) or to tokenize locally (lm-eval's probe). So a call that neither
source can answer is not a replay miss: it is answered 404 `tokenizer_unanswered` (as a
server without the endpoint answers; harnesses that call it tolerate that), counted apart
(`Stats.tokenizer`), and `run` reports it prominently and fails on it only with
`--strict`. What is computed, only what can be computed faithfully:

- `/tokenize` of a `prompt`: the ids `tokenizer(prompt, add_special_tokens=...)` gives
  (`LocalTokenizer.encode`, the way transformers encodes with that tokenizer.json), their
  count, `token_strs` (`convert_ids_to_tokens`) when asked, and `max_model_len` only when
  the saved run knows it (every recorded tokenizer answer of the model says the same);
- `/detokenize`: transformers' `decode` of the ids (`LocalTokenizer.decode`).

Never computed: `/tokenize` of `messages` (it needs the model's chat template rendered,
and a guessed rendering would give wrong counts quietly), and `/tokenizer_info` (vLLM's
answer is transformers' view of the tokenizer, its init kwargs and class name, which a
tokenizer.json alone does not give). Those are answered only from recordings.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import orjson

from ..errors import ReplayServerError, TokenizerUnanswered
from ..index.index import Index, ModelRun
from ..paths import DETOKENIZE_PATH, TOKENIZER_INFO_PATH
from ..saved.local_tokenizer import LocalTokenizer
from ..wire import tokenizer
from ..wire.tokenizer.fields import DETOKENIZE, TOKENIZE
from .state import State

log = logging.getLogger(__name__)

_JSON_TYPE = (b"content-type", b"application/json")
SOURCE_HEADER = b"x-replay-source"

NOT_RECORDED = "no recorded answer for this request"
NO_TOKENIZER = f"{NOT_RECORDED}, and no --tokenizer to compute one"
CHAT = (f"{NOT_RECORDED}; a `messages` request needs the model's chat template rendered, "
        "which replay-server does not do (a guess would give wrong counts quietly)")
INFO = (f"{NOT_RECORDED}; vLLM's /tokenizer_info is transformers' view of the tokenizer, "
        "which --tokenizer cannot rebuild exactly")
DIFFERENT = "the recorded answers to this request differ (two tokenizers under one model?)"
OUT_OF_VOCABULARY = "a token id is outside the tokenizer's vocabulary"


class TokenizerAnswers:
    """The answer to one tokenizer call (a body in, a `(headers, body)` out, or a
    ReplayServerError), counted in the replay's state whatever it is. Its `x-replay-source` header
    says where the answer came from: `recording` or `--tokenizer`."""

    def __init__(self, index: Index, state: State, local: LocalTokenizer | None) -> None:
        self.index, self.state, self.local = index, state, local

    def answer(self, endpoint: str, body: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
        model = None
        try:
            request = tokenizer.parse(endpoint, body)
            model = request.model
            if model is None and len(self.index.models) != 1:
                raise not_answered(endpoint, f"the request names no model, and this server "
                                   f"holds {len(self.index.models)}")
            run = self.index.select(model)
            recorded = run.tokenizer.get(request.key)
            if recorded is not None:
                how, data, source = "recorded", recorded, b"recording"
            else:  # (recorded as None: recordings that differ)
                why = DIFFERENT if request.key in run.tokenizer else None
                data = self._computed(run, request, why)
                how, source = "computed", b"--tokenizer"
        except ReplayServerError as error:
            self.unanswered(endpoint, model, error, hashlib.sha256(body).hexdigest())
            raise
        self.state.record({"kind": "tokenizer", "replica": self.state.replica, "how": how})
        return [_JSON_TYPE, (b"content-length", b"%d" % len(data)),
                (SOURCE_HEADER, source)], data

    def _computed(self, run: ModelRun, request: tokenizer.TokenizerRequest,
                  why: str | None) -> bytes:
        """The answer computed with `--tokenizer`, or TokenizerUnanswered saying why not."""
        local, data = self.local, request.data
        if why is None and request.table not in (TOKENIZE, DETOKENIZE):
            why = INFO if request.endpoint == TOKENIZER_INFO_PATH else CHAT
        if why is None and local is None:
            why = NO_TOKENIZER
        if why is not None or local is None:
            raise not_answered(request.endpoint, why or NO_TOKENIZER)
        if request.endpoint == DETOKENIZE_PATH:
            tokens, size = data["tokens"], local.vocab_size()
            if any(t >= size for t in tokens):
                raise not_answered(request.endpoint, OUT_OF_VOCABULARY, param="tokens")
            return orjson.dumps({"prompt": local.decode(tokens)})
        special = data.get("add_special_tokens")
        ids = local.encode(data["prompt"], add_special_tokens=special is not False)
        answer: dict[str, Any] = {"count": len(ids)}
        if run.max_model_len is not None:  # vLLM always sends it; never invented here
            answer["max_model_len"] = run.max_model_len
        answer["tokens"] = ids
        answer["token_strs"] = local.token_strs(ids) if data.get("return_token_strs") else None
        return orjson.dumps(answer)

    def unanswered(self, endpoint: str, model: str | None, error: ReplayServerError,
                   call: str) -> None:
        """Count a tokenizer call that got no answer; the first of each reason is logged
        at WARNING (a harness may send two a request: one line each would drown the log)."""
        why = error.detail.get("why") or f"request error {error.status}: {error.message}"
        first = self.state.record({"kind": "tokenizer_error", "replica": self.state.replica,
                                   "endpoint": endpoint, "model": model, "why": why,
                                   "call": call})
        (log.debug if first is False else log.warning)(
            "tokenizer call unanswered model=%s %s: %s", model or "-", endpoint,
            error.message)


def not_answered(endpoint: str, why: str, param: str | None = None) -> TokenizerUnanswered:
    error = TokenizerUnanswered(f"{endpoint} was not answered: {why}. No saved generation "
                                "is affected; a harness that derives token counts from it "
                                "may count differently.", param=param)
    error.detail["why"] = why
    return error
