"""Shared by the tokenizer's tests (test_local_tokenizer.py) and lm-eval's token tests
(test_tokens.py): the tokenizer folders lm-eval's `tokenizer=` takes, and texts to encode."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

DATA = Path(__file__).parents[1] / "data"
WORDLEVEL = DATA / "gen" / "tokenizer"
BPE = DATA / "gen" / "tokenizer_bpe"

TEXTS = [
    "Question: What is 4 + 5?\nAnswer:", "Question: What is 4 + 5?\nAnswer: ", " 9", "9",
    "Answer:\n\n", "  leading and trailing  ", "<s> in the text </s>", "", " ", "\t\n",
    "Ünïcödé — 漢字 😀", "What is 123456 + 7?", "x\u00a0y\u3000",
]


def litellm_file(name: str) -> Path | None:
    spec = importlib.util.find_spec("litellm")  # located, not imported (slow)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "litellm_core_utils" / "tokenizers" / name
    return path if path.is_file() else None


def tokenizer_folder(tmp: Path, name: str, tokenizer_json: Path, config: dict[str, Any]
                     ) -> Path:
    folder = tmp / name
    folder.mkdir()
    shutil.copy(tokenizer_json, folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def tokenizer_folders(tmp: Path) -> dict[str, Path]:
    """Tokenizer folders as lm-eval's `tokenizer=` takes them: the two committed ones,
    config variants that make transformers rewrite the post-processor, and two real BPE
    tokenizers shipped inside the litellm package (a test extra), when it is installed."""
    out = {"wordlevel": WORDLEVEL, "bpe": BPE}
    base = json.loads((BPE / "tokenizer_config.json").read_text())
    out["bpe_add_bos_false"] = tokenizer_folder(tmp, "bpe_f", BPE / "tokenizer.json",
                                       {**base, "add_bos_token": False})
    out["bpe_add_eos"] = tokenizer_folder(tmp, "bpe_e", BPE / "tokenizer.json",
                                 {**base, "add_eos_token": True})
    # no post-processor in tokenizer.json, add_bos_token in the config: still no BOS
    data = json.loads((BPE / "tokenizer.json").read_text())
    data["post_processor"] = None
    (tmp / "no_pp.json").write_text(json.dumps(data))
    out["bpe_no_post_processor"] = tokenizer_folder(tmp, "bpe_p", tmp / "no_pp.json",
                                           {**base, "add_bos_token": True})
    # a special token the tokenizer.json does not have: transformers adds it
    out["bpe_new_special"] = tokenizer_folder(tmp, "bpe_n", BPE / "tokenizer.json",
                                     {**base, "unk_token": "<unk>", "eos_token": "<|end|>"})
    # special_tokens_map.json overrides the config (no added_tokens_decoder there)
    out["bpe_special_map"] = tokenizer_folder(tmp, "bpe_m", BPE / "tokenizer.json", base)
    (out["bpe_special_map"] / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": {"content": "<|end|>", "lstrip": False, "rstrip": False,
                       "normalized": False, "single_word": False}}))
    deepseek = litellm_file("deepseek_tokenizer.json")
    if deepseek is not None:  # byte-level BPE with digit splitting, a real BOS
        out["deepseek"] = tokenizer_folder(tmp, "deepseek", deepseek, {
            "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True,
            "bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"})
    anthropic = litellm_file("anthropic_tokenizer.json")
    if anthropic is not None:  # byte-level BPE behind an NFKC normalizer, no post-processor
        out["anthropic"] = tokenizer_folder(tmp, "anthropic", anthropic, {
            "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<EOT>"})
    return out
