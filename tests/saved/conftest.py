"""The tokenizer folders, loaded once per test module that asks (tests/saved/support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay_server.saved.local_tokenizer import LocalTokenizer, load_tokenizer
from tests.saved.support import tokenizer_folders


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return tokenizer_folders(tmp_path_factory.mktemp("tokenizers"))


@pytest.fixture(scope="module")
def toks(folders: dict[str, Path]) -> dict[str, LocalTokenizer]:
    return {name: load_tokenizer(path) for name, path in folders.items()}
