"""The run's tokenizer, loaded from a local folder as transformers loads it for lm-eval
(issue 16): the ids and special tokens transformers itself gives for the same folder, and
every way a folder cannot be used, refused with what to do instead."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from replay_server.saved.local_tokenizer import (
    LocalTokenizer,
    TokenizerError,
    load_tokenizer,
    transformers_mismatches,
)
from tests.saved.support import BPE, TEXTS, tokenizer_folder

pytestmark = pytest.mark.harness  # transformers, litellm's tokenizer files


def test_load_a_folder_or_its_tokenizer_json() -> None:
    by_folder, by_file = load_tokenizer(BPE), load_tokenizer(BPE / "tokenizer.json")
    assert (by_folder.bos_token, by_folder.bos_token_id, by_folder.eos_token) == ("<s>", 0, "</s>")
    assert by_folder.caveats == () and by_folder.tokenizer_class == "TokenizersBackend"
    text = "Question: What is 4 + 5?\nAnswer: 9"
    assert by_file.encode(text, add_special_tokens=True) == by_folder.encode(
        text, add_special_tokens=True)
    assert by_folder.encode(text, add_special_tokens=True)[0] == 0  # the post-processor's <s>


def test_never_downloads(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="never downloads"):
        load_tokenizer("gpt2")
    (tmp_path / "tokenizer.model").write_bytes(b"")
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(TokenizerError, match="not a `tokenizers` tokenizer.json"):
        load_tokenizer(tmp_path)


def test_without_the_tokenizers_package_the_error_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import raises ImportError
    with pytest.raises(TokenizerError, match=r"install replay-server\[tokens\]"):
        load_tokenizer(BPE)


def test_model_specific_classes_are_flagged(tmp_path: Path) -> None:
    folder = tokenizer_folder(tmp_path, "llama", BPE / "tokenizer.json",
                     {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>"})
    assert "LlamaTokenizer" in load_tokenizer(folder).caveats[0]
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(BPE / "tokenizer.json", alone / "tokenizer.json")
    assert "no tokenizer_config.json" in load_tokenizer(alone / "tokenizer.json").caveats[0]


def test_token_ids_equal_transformers(folders: dict[str, Path],
                                      toks: dict[str, LocalTokenizer]) -> None:
    """The ids transformers gives lm-eval for the same folder, with and without special
    tokens (lm-eval's add_bos_token), on texts with special tokens, odd whitespace and
    non-ASCII; the post-processor rules (add_bos_token/add_eos_token in the config, no
    post-processor) and special tokens missing from tokenizer.json included."""
    import transformers
    for name, folder in folders.items():  # lm-eval's prefix_token_id and eos_string
        ref = transformers.AutoTokenizer.from_pretrained(str(folder))
        ours = toks[name]
        assert (ours.bos_token, ours.bos_token_id, ours.eos_token, ours.eos_token_id) == (
            ref.bos_token, ref.bos_token_id, ref.eos_token, ref.eos_token_id), name
    assert toks["bpe_special_map"].eos_token == "<|end|>"
    extra = ["<|end|> <unk>", "<｜begin▁of▁sentence｜>hi", "<EOT>x", "ﬁ ①"]
    for name, folder in folders.items():
        for special in (False, True):
            bad = transformers_mismatches(toks[name], folder, TEXTS + extra,
                                                 add_special_tokens=special)
            assert bad == [], (name, special, bad)
    # transformers 5 ignores the config's add_bos_token/add_eos_token next to a tokenizer.json
    assert toks["bpe_add_bos_false"].encode("a", add_special_tokens=True)[0] == 0
    assert toks["bpe_add_eos"].encode("a", add_special_tokens=True)[-1] != 1
    assert toks["bpe_no_post_processor"].encode("a", add_special_tokens=True)[0] != 0
    assert toks["bpe_new_special"].encode("<|end|>", add_special_tokens=False) == [
        toks["bpe_new_special"].eos_token_id]
