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

The tokenizer is loaded with the `tokenizers` library only (no transformers, no hub), the
way transformers 5 loads a generic `TokenizersBackend`/`PreTrainedTokenizerFast` folder:
special tokens named in `tokenizer_config.json` are added when missing, and the config's
`add_bos_token`/`add_eos_token` are ignored (transformers 5 drops them when there is a
tokenizer.json: BOS comes only from tokenizer.json's own post-processor).
A model-specific `tokenizer_class` (e.g. `LlamaTokenizer`) is rebuilt by transformers with
its own code and is listed in `LocalTokenizer.caveats`: check such a tokenizer with
`transformers_mismatches` once.
"""

from __future__ import annotations

import importlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer

INSTALL_HINT = "install replay-server[tokens] (the `tokenizers` package) to use --tokenizer"

# lm-eval's TemplateAPI defaults (models/api_models.py, TemplateAPI.__init__).
DEFAULT_MAX_LENGTH = 2048
DEFAULT_MAX_GEN_TOKS = 256

# tokenizer_config.json classes that transformers 5 builds straight from tokenizer.json.
GENERIC_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
# transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order (tokenization_utils_base.py).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                       "cls_token", "mask_token")
# The `top_logprobs` key of the better alternative that makes a choice not greedy: the
# saved run kept only that the continuation was not the greedy one, not which token was.
UNKNOWN_GREEDY = "<unknown greedy token>"


class TokenizerError(ValueError):
    """The tokenizer cannot be loaded (missing, would need a download, or unreadable)."""


class NotRepresentable(ValueError):
    """No completions response makes lm-eval's parser read back the saved values."""


def _tokenizers() -> Any:
    try:
        return importlib.import_module("tokenizers")
    except ImportError as e:
        raise TokenizerError(f"a tokenizer was given but `tokenizers` is missing: "
                             f"{INSTALL_HINT}") from e


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class LocalTokenizer:
    """A `tokenizers.Tokenizer` set up as transformers would set it up for lm-eval, plus the
    special tokens lm-eval reads from it."""

    backend: Tokenizer
    path: Path  # the tokenizer.json read
    bos_token: str | None
    bos_token_id: int | None
    eos_token: str | None
    eos_token_id: int | None
    tokenizer_class: str | None
    clean_up_tokenization_spaces: bool
    caveats: tuple[str, ...]  # why the ids might differ from transformers' (empty: none)

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        ids: list[int] = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        return list(ids)

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool
                     ) -> list[list[int]]:
        return [list(e.ids) for e in self.backend.encode_batch(
            list(texts), add_special_tokens=add_special_tokens)]

    def decode(self, ids: Sequence[int]) -> str:
        """transformers' `batch_decode` of one sequence, as lm-eval calls it
        (`skip_special_tokens=False`; `clean_up_tokenization_spaces` from the config, which
        transformers 5 ignores for BPE models)."""
        text: str = self.backend.decode(list(ids), skip_special_tokens=False)
        if self.clean_up_tokenization_spaces and self._model_type() != "BPE":
            text = _clean_up_tokenization(text)
        return text

    def token_text(self, token_id: int) -> str:
        """One token as text, as servers show it in `logprobs.tokens`."""
        text: str = self.backend.decode([token_id], skip_special_tokens=False)
        return text

    def token_strs(self, ids: Sequence[int]) -> list[str | None]:
        """transformers' `convert_ids_to_tokens` (what vLLM's `/tokenize` answers as
        `token_strs`): each id's token as the vocabulary spells it (None: no such id)."""
        return [self.backend.id_to_token(i) for i in ids]

    def vocab_size(self) -> int:
        """How many ids the tokenizer knows, added tokens included."""
        size: int = self.backend.get_vocab_size(with_added_tokens=True)
        return size

    def _model_type(self) -> str:
        return type(self.backend.model).__name__

    @property
    def prefix_token_id(self) -> int | None:
        """lm-eval's `TemplateAPI.prefix_token_id` (without `custom_prefix_token_id`)."""
        return self.bos_token_id if self.bos_token_id is not None else self.eos_token_id


def _clean_up_tokenization(text: str) -> str:
    """transformers' `PreTrainedTokenizerBase.clean_up_tokenization`."""
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                 (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"),
                 (" 're", "'re")):
        text = text.replace(a, b)
    return text


def load_tokenizer(path: str | os.PathLike[str]) -> LocalTokenizer:
    """The tokenizer in `path`: a folder holding `tokenizer.json` (plus, as lm-eval's
    `tokenizer=` folder usually has, `tokenizer_config.json` and maybe
    `special_tokens_map.json`), or a `tokenizer.json` file (the config files next to it are
    read too). Never downloads: anything else (a hub name, a folder with only
    `tokenizer.model` or `vocab.json`) is refused with what to do instead."""
    given = Path(path)
    if given.is_dir():
        folder, file = given, given / "tokenizer.json"
        if not file.is_file():
            present = sorted(p.name for p in given.iterdir())[:12]
            raise TokenizerError(
                f"{given} has no tokenizer.json (it holds {present}); replay-server reads only "
                "the `tokenizers` format: save it once with transformers "
                "(AutoTokenizer.from_pretrained(DIR).save_pretrained(NEW_DIR)) and give NEW_DIR")
    elif given.is_file():
        folder, file = given.parent, given
    else:
        raise TokenizerError(
            f"{given} is not a local file or folder; replay-server never downloads a "
            "tokenizer: give the folder that lm-eval's `tokenizer=` loaded (with "
            "tokenizer.json), e.g. a snapshot in the Hugging Face cache")
    tk = _tokenizers()
    try:
        backend: Tokenizer = tk.Tokenizer.from_file(str(file))
    except Exception as e:  # noqa: BLE001 - the Rust side raises plain Exception
        raise TokenizerError(f"{file}: not a `tokenizers` tokenizer.json: {e}") from e
    config = _json_object(folder / "tokenizer_config.json")
    special_map = _json_object(folder / "special_tokens_map.json")
    return _set_up(backend, file, config, special_map)


def _json_object(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TokenizerError(f"{path}: not readable JSON: {e}") from e
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: expected a JSON object")
    return data


def _content(value: Any) -> str | None:
    """A special token as saved: a string or an AddedToken dict (`content`)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        content: str = value["content"]
        return content
    return None


def _added_token(tk: Any, value: Any, *, special: bool) -> Any:
    if isinstance(value, dict):
        attrs = {k: value[k] for k in ("single_word", "lstrip", "rstrip", "normalized")
                 if isinstance(value.get(k), bool)}
        attrs.setdefault("normalized", not special)
        return tk.AddedToken(value["content"], special=special, **attrs)
    return tk.AddedToken(value, special=special, normalized=False)


def _set_up(backend: Tokenizer, file: Path, config: dict[str, Any],
            special_map: dict[str, Any]) -> LocalTokenizer:
    """What transformers 5's `TokenizersBackend.__init__`/`_post_init` do to the backend."""
    tk = _tokenizers()
    caveats: list[str] = []
    cls = config.get("tokenizer_class")
    cls = cls if isinstance(cls, str) else None
    if cls is not None and cls not in GENERIC_CLASSES:
        caveats.append(f"tokenizer_class {cls}: transformers may build its pre-tokenizer and "
                       "normalizer with its own code instead of reading tokenizer.json")
    if config.get("auto_map"):
        caveats.append("auto_map: the tokenizer has remote code, which is not run here")
    if not config:
        caveats.append("no tokenizer_config.json next to tokenizer.json: no BOS/EOS known "
                       "(lm-eval's prefix token for an empty context and its eos string)")

    # 1. tokens of `added_tokens_decoder` that tokenizer.json lacks
    present = {t.content for t in backend.get_added_tokens_decoder().values()}
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for _, value in sorted(decoder.items(), key=lambda kv: int(kv[0])):
            content = _content(value)
            if content is None or content in present:
                continue
            special = bool(value.get("special")) if isinstance(value, dict) else False
            token = _added_token(tk, value, special=special)
            (backend.add_special_tokens if special else backend.add_tokens)([token])
            present.add(content)

    # 2. the named special tokens; special_tokens_map.json overrides the config unless the
    #    config has added_tokens_decoder (transformers' from_pretrained, "legacy" branch)
    settings = dict(config)
    if "added_tokens_decoder" not in config:
        settings.update(special_map)
    named: dict[str, Any] = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = settings.get(name)
        if _content(value) is not None:
            named[name] = value
    extra: list[Any] = []
    for name in ("extra_special_tokens", "additional_special_tokens"):
        values = settings.get(name)
        if isinstance(values, dict):
            values = list(values.values())
        if isinstance(values, list):
            extra += [v for v in values if _content(v) is not None]
    for value in [*named.values(), *extra]:
        content = _content(value)
        if content is not None and content not in present:
            backend.add_special_tokens([_added_token(tk, value, special=True)])
            present.add(content)

    bos, eos = _content(named.get("bos_token")), _content(named.get("eos_token"))
    bos_id = backend.token_to_id(bos) if bos is not None else None
    eos_id = backend.token_to_id(eos) if eos is not None else None

    # 3. the post-processor: transformers 5 drops the config's add_bos_token/add_eos_token
    #    when there is a tokenizer.json (`_from_pretrained`), so it only fills a missing one,
    #    with neither BOS nor EOS (`TokenizersBackend.update_post_processor`)
    if backend.post_processor is None:
        backend.post_processor = tk.processors.TemplateProcessing(
            single="$A:0", pair="$A:0 $B:1", special_tokens=[])

    # 4. what lm-eval's call sets: no truncation, no padding; special tokens in the text are
    #    matched unless the config says split_special_tokens
    backend.no_truncation()
    backend.no_padding()
    backend.encode_special_tokens = bool(config.get("split_special_tokens", False))
    return LocalTokenizer(
        backend=backend, path=file, bos_token=bos, bos_token_id=bos_id, eos_token=eos,
        eos_token_id=eos_id, tokenizer_class=cls,
        clean_up_tokenization_spaces=bool(config.get("clean_up_tokenization_spaces", False)),
        caveats=tuple(caveats))


def transformers_mismatches(tokenizer: LocalTokenizer, folder: str | os.PathLike[str],
                            texts: Iterable[str], *, add_special_tokens: bool = False,
                            limit: int = 5) -> list[str]:
    """Texts that transformers (if installed) encodes differently from `tokenizer`: the
    check for a tokenizer with `caveats`. Loads `folder` with `local_files_only=True`."""
    try:
        auto = importlib.import_module("transformers").AutoTokenizer
    except ImportError as e:
        raise TokenizerError("checking against transformers needs transformers") from e
    reference = auto.from_pretrained(str(folder), local_files_only=True)
    bad: list[str] = []
    for text in texts:
        want = list(reference(text, add_special_tokens=add_special_tokens,
                              truncation=False).input_ids)
        if tokenizer.encode(text, add_special_tokens=add_special_tokens) != want:
            bad.append(text)
            if len(bad) >= limit:
                break
    return bad


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
