"""Token ids as lm-evaluation-harness makes them, and loglikelihood answers its parser reads
back exactly (issue 16).

lm-eval's `local-completions` sends token ids (`tokenized_requests=True`, its default) while
its `--log_samples` files keep text. With the run's tokenizer (a local `tokenizer.json`, or
the folder lm-eval loaded with `tokenizer=`), these pure functions rebuild the ids of every
saved request, so a request can be matched by its ids, and build the `choices[i]` of a
loglikelihood request from the saved `(logprob, is_greedy)`. Facts and citations are in
the issue 16 notes (tokens.md). Everything mirrors lm-eval 0.4.13 with transformers 5.x:

- `tok_encode` (`TemplateAPI.tok_encode`, tokenizer_backend=huggingface):
  `tokenizer(text, add_special_tokens=add_special_tokens or add_bos_token,
  truncation=False).input_ids`. lm-eval never passes `add_special_tokens=True` on its own,
  so special tokens (the post-processor's BOS/EOS) come only with `add_bos_token=True`.
- generation prompt (`TemplateAPI.generate_until`): `tok_encode(context)` cut to its last
  `max_length - 1 - max_gen_toks` ids (`max_gen_toks` from the request's own generation
  kwargs, else the model's), sent as a batch: `prompt` = a list of id lists.
- loglikelihood pair (`TemplateLM.loglikelihood`, `TemplateLM._encode_pair`): trailing
  whitespace of the context moves to the continuation; `whole = tok_encode(ctx + cont)`,
  `ctx_ids = tok_encode(ctx)`, `cont_ids = whole[len(ctx_ids):]`; an empty context becomes
  the prefix token (BOS, else EOS). The ids sent are `(ctx_ids + cont_ids)[-(max_length-1):]`
  and `ctxlen` shrinks by what was cut (`TemplateAPI.batch_loglikelihood_requests`).
- parsing (`LocalCompletionsAPI.parse_logprobs`): `logprob = sum(token_logprobs[ctxlen:-1])`
  and `is_greedy` = every `token_logprobs[i] == max(top_logprobs[i].values())` over the same
  slice.

The tokenizer is the run's own, loaded as transformers loads it: see
saved/local_tokenizer.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .local_tokenizer import LocalTokenizer

# lm-eval's TemplateAPI defaults (models/api_models.py, TemplateAPI.__init__).
DEFAULT_MAX_LENGTH = 2048
DEFAULT_MAX_GEN_TOKS = 256
# The `top_logprobs` key of the better alternative that makes a choice not greedy: the
# saved run kept only that the continuation was not the greedy one, not which token was.
UNKNOWN_GREEDY = "<unknown greedy token>"


class NotRepresentable(ValueError):
    """No completions response makes lm-eval's parser read back the saved values."""


# --------------------------------------------------------------------------- encoding


def tok_encode(tokenizer: LocalTokenizer, text: str, *, add_bos_token: bool = False,
               add_special_tokens: bool = False) -> list[int]:
    """`TemplateAPI.tok_encode` (huggingface backend, no left_truncate_len): special tokens
    are added when asked for or when the model was given `add_bos_token=True`."""
    return tokenizer.encode(text, add_special_tokens=add_special_tokens or add_bos_token)


def _generation_cut(max_length: int, max_gen_toks: int) -> int:
    return (max_length - 1) - max_gen_toks


def encode_like_lm_eval(tokenizer: LocalTokenizer, context: str, *,
                        add_bos_token: bool = False,
                        max_length: int | None = DEFAULT_MAX_LENGTH,
                        max_gen_toks: int = DEFAULT_MAX_GEN_TOKS) -> list[int]:
    """The ids lm-eval's `local-completions` sends for a generate_until `context`
    (`TemplateAPI.generate_until`, tokenized_requests=True): `tok_encode(context)`, then
    `ids[-(max_length - 1 - max_gen_toks):]` exactly as lm-eval slices (a cut of 0 keeps
    everything, a negative one drops ids from the front). `max_length` and `max_gen_toks`
    are the run's `model_args` (defaults 2048 and 256), except that a request whose
    generation kwargs set `max_gen_toks` uses its own; `max_length=None` skips the cut."""
    ids = tok_encode(tokenizer, context, add_bos_token=add_bos_token)
    if max_length is None:
        return ids
    return ids[-_generation_cut(max_length, max_gen_toks):]


def was_truncated(tokenizer: LocalTokenizer, context: str, *, add_bos_token: bool = False,
                  max_length: int = DEFAULT_MAX_LENGTH,
                  max_gen_toks: int = DEFAULT_MAX_GEN_TOKS) -> bool:
    """Whether lm-eval cut this generation context (then the ids no longer stand for the
    saved text, and several texts may share one id list)."""
    full = tok_encode(tokenizer, context, add_bos_token=add_bos_token)
    return encode_like_lm_eval(tokenizer, context, add_bos_token=add_bos_token,
                               max_length=max_length, max_gen_toks=max_gen_toks) != full


def encode_pair(tokenizer: LocalTokenizer, context: str, continuation: str, *,
                add_bos_token: bool = False, custom_prefix_token_id: int | None = None
                ) -> tuple[list[int], list[int]]:
    """`(context_enc, continuation_enc)` of one loglikelihood request, as
    `TemplateLM.loglikelihood` makes them (before the max_length cut)."""
    if context == "":
        cont = tok_encode(tokenizer, continuation, add_bos_token=add_bos_token)
        prefix = (custom_prefix_token_id if custom_prefix_token_id is not None
                  else tokenizer.prefix_token_id)
        if prefix is None:
            raise ValueError("an empty context needs the tokenizer's BOS or EOS token (or "
                             "custom_prefix_token_id)")
        if not cont:  # lm-eval fails here too (continuation_enc[0])
            raise ValueError("an empty context with a continuation of no tokens")
        return ([prefix], cont) if prefix != cont[0] else (cont[:1], cont[1:])
    # TemplateLM._encode_pair, causal branch
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tok_encode(tokenizer, context + continuation, add_bos_token=add_bos_token)
    ctx = tok_encode(tokenizer, context, add_bos_token=add_bos_token)
    return ctx, whole[len(ctx):]


def loglikelihood_input(context_ids: Sequence[int], continuation_ids: Sequence[int], *,
                        max_length: int = DEFAULT_MAX_LENGTH) -> tuple[list[int], int]:
    """`(ids sent, ctxlen)` (`TemplateAPI.batch_loglikelihood_requests`): the pair cut to its
    last `max_length - 1` ids, `ctxlen` shrunk by what was cut. `ctxlen` is where lm-eval's
    parser starts summing; the request itself does not carry it."""
    limit = max_length - 1
    ctx, cont = list(context_ids), list(continuation_ids)
    ids = (ctx + cont)[-limit:]
    return ids, len(ctx) - max(0, len(ctx) + len(cont) - limit)


def decode_like_lm_eval(tokenizer: LocalTokenizer, ids: Sequence[int]) -> str:
    """The text prompt lm-eval sends for loglikelihood ids when `tokenized_requests=False`
    (`TemplateAPI.create_message` -> `decode_batch` -> transformers `batch_decode`)."""
    return tokenizer.decode(ids)


# --------------------------------------------------------------------------- loglikelihood


def saved_loglikelihood(value: Any) -> tuple[float, bool]:
    """One request's answer in a samples file: `resps[i][0]`, lm-eval's
    `(logprob, is_greedy)` stringified (`sanitize_list`), e.g. `["-3.8627", "False"]`."""
    if (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], str)
            and value[1] in ("True", "False")):
        try:
            logprob = float(value[0])
        except ValueError:
            pass
        else:
            return logprob, value[1] == "True"
    raise ValueError(f"expected [\"<logprob>\", \"True\"|\"False\"], got {value!r}")


def parse_like_lm_eval(choice: dict[str, Any], ctxlen: int) -> tuple[float, bool]:
    """What `LocalCompletionsAPI.parse_logprobs` reads from one choice (a local mirror, to
    check a built choice; the tests compare it with lm-eval's own)."""
    logprobs = choice["logprobs"]
    token_logprobs = logprobs["token_logprobs"][ctxlen:-1]
    tops = logprobs["top_logprobs"][ctxlen:-1]
    is_greedy = True
    for tok, top in zip(token_logprobs, tops, strict=False):
        if tok != max(top.values()):
            is_greedy = False
            break
    return sum(token_logprobs), is_greedy


def loglikelihood_choice(ids: Sequence[int], ctxlen: int, logprob: float, is_greedy: bool,
                         *, tokenizer: LocalTokenizer | None = None, index: int = 0,
                         max_tokens: int = 1) -> dict[str, Any]:
    """The completions `choices[index]` for an `echo: true, logprobs: 1` request of `ids`
    (context + continuation, as sent) such that lm-eval's parser, with this `ctxlen`, reads
    exactly `(logprob, is_greedy)`.

    The saved run kept only the sum, so the whole logprob sits on the first continuation
    token and every other token has logprob 0.0: the sum is bit-exact whatever the order or
    method of summation (Python 3.12's compensated `sum` included). Each `top_logprobs`
    holds the token itself; a non-greedy answer adds `UNKNOWN_GREEDY` with the next float
    above the logprob on that first token. Context tokens carry 0.0 (the first one null,
    as servers echo it): lm-eval never reads them. With `max_tokens: 1` one generated token
    follows (empty text, logprob 0.0: it was not saved; lm-eval drops it with `[:-1]`).
    Raises NotRepresentable when no response can carry the values (a logprob that is not
    finite, which JSON cannot carry; a non-zero or non-greedy value for a continuation of
    no scored token; `max_tokens` other than 0 or 1)."""
    n = len(ids)
    if not 0 < ctxlen <= n:
        raise ValueError(f"ctxlen {ctxlen} does not fit {n} ids (lm-eval asserts ctxlen > 0)")
    if max_tokens not in (0, 1):
        raise NotRepresentable(f"max_tokens {max_tokens}: only the loglikelihood request's "
                               "max_tokens 1 (or 0) can be replayed; the tokens it would "
                               "generate were not saved")
    if not math.isfinite(logprob):
        raise NotRepresentable(f"logprob {logprob!r} is not finite: JSON cannot carry it")
    texts = [tokenizer.token_text(i) if tokenizer is not None else f"<{i}>" for i in ids]
    texts += [""] * max_tokens
    token_logprobs: list[float | None] = [None] + [0.0] * (len(texts) - 1)
    tops: list[dict[str, float] | None] = [None] + [{t: 0.0} for t in texts[1:]]
    scored = len(texts) - 1 - ctxlen  # positions lm-eval sums: [ctxlen:-1]
    if scored > 0:
        token_logprobs[ctxlen] = logprob
        top = {texts[ctxlen]: logprob}
        if not is_greedy:
            alt = UNKNOWN_GREEDY if texts[ctxlen] != UNKNOWN_GREEDY else UNKNOWN_GREEDY + "*"
            top[alt] = math.nextafter(logprob, math.inf)
            if not math.isfinite(top[alt]):
                raise NotRepresentable(f"no finite logprob is above {logprob!r}")
        tops[ctxlen] = top
    offsets, at = [], 0
    for t in texts:
        offsets.append(at)
        at += len(t)
    choice: dict[str, Any] = {
        "index": index,
        "text": "".join(texts),
        "logprobs": {"tokens": texts, "token_logprobs": token_logprobs,
                     "top_logprobs": tops, "text_offset": offsets},
        "finish_reason": "length",
    }
    got = parse_like_lm_eval(choice, ctxlen)
    if got[0] != logprob or got[1] != is_greedy:
        raise NotRepresentable(
            f"lm-eval would read {got} instead of {(logprob, is_greedy)}: the continuation has "
            f"{max(scored, 0)} scored token(s) here (max_tokens {max_tokens})")
    return choice
