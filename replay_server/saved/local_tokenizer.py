"""A tokenizer of the run, loaded from a local folder as transformers sets it up for
lm-eval (`LocalTokenizer`, `load_tokenizer`): what saved/tokens.py encodes lm-eval's
requests with, and what answers vLLM's tokenizer calls with --tokenizer
(replay/tokenizer.py). It never downloads anything (issue 16).

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
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer

INSTALL_HINT = "install replay-server[tokens] (the `tokenizers` package) to use --tokenizer"

# tokenizer_config.json classes that transformers 5 builds straight from tokenizer.json.
GENERIC_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
# transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order (tokenization_utils_base.py).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                       "cls_token", "mask_token")


class TokenizerError(ValueError):
    """The tokenizer cannot be loaded (missing, would need a download, or unreadable)."""


def _tokenizers() -> Any:
    try:
        return importlib.import_module("tokenizers")
    except ImportError as e:
        raise TokenizerError(f"a tokenizer was given but `tokenizers` is missing: "
                             f"{INSTALL_HINT}") from e


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


CONFIGS = ("tokenizer_config.json", "special_tokens_map.json")  # read beside tokenizer.json


def load_tokenizer(path: str | os.PathLike[str]) -> LocalTokenizer:
    """The tokenizer in `path`: a folder holding `tokenizer.json` (plus, as lm-eval's
    `tokenizer=` folder usually has, `tokenizer_config.json` and maybe
    `special_tokens_map.json`), or a `tokenizer.json` file (the config files next to it are
    read too). Never downloads: anything else (a hub name, a folder with only
    `tokenizer.model` or `vocab.json`) is refused with what to do instead."""
    given = Path(path)
    folder, file = _located(given)
    tk = _tokenizers()
    try:
        backend: Tokenizer = tk.Tokenizer.from_file(str(file))
    except Exception as e:  # noqa: BLE001 - the Rust side raises plain Exception
        raise TokenizerError(f"{file}: not a `tokenizers` tokenizer.json: {e}") from e
    config, special_map = (_json_object(folder / name) for name in CONFIGS)
    return _set_up(backend, file, config, special_map)


def read_from(path: str | os.PathLike[str]) -> list[Path]:
    """The files `load_tokenizer(path)` reads (those of them that exist): what the
    tokenizer is, for the index cache's key; [] for a path it refuses."""
    try:
        folder, file = _located(Path(path))
    except TokenizerError:
        return []
    return [p for p in (file, *(folder / name for name in CONFIGS)) if p.is_file()]


def _located(given: Path) -> tuple[Path, Path]:
    """The folder and the tokenizer.json of `--tokenizer given`; TokenizerError if none."""
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
    return folder, file


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
