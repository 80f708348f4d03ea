"""The data of the arith_* lm-eval tasks, read from beside this file.

lm-eval hands a task YAML's `data_files` to `datasets`, which resolves them against the
working directory, not the YAML's folder: a task then loads only when lm-eval runs in
this folder. The tasks name this loader (`custom_dataset`) instead, so that
`--include_path tests/data/gen/tasks` works from anywhere, the repository's root
included, where the recipes of docs/recipes/ run their commands.
"""

from pathlib import Path
from typing import Any

import datasets

HERE = Path(__file__).parent


def load(data_files: dict[str, str], **_metadata: Any) -> datasets.DatasetDict:
    """The task's splits, each file named relative to this folder (lm-eval passes the
    task's metadata too, which the data does not depend on)."""
    files = {split: str(HERE / name) for split, name in data_files.items()}
    return datasets.load_dataset("json", data_files=files)
