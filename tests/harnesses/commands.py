"""replay-server and the harnesses as commands, started the way a user starts them.

`replay-server record|serve ... --port 0` run in the background until stopped; a harness
runs to its end. When REPLAY_HARNESS_TRANSCRIPT names a file, every command line and the
score lines the harness printed are appended there: the per-harness recipes of docs/recipes/
are these commands, and the scores are what the harnesses printed.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support import Spawned, spawn

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REPLAY = [sys.executable, "-m", "replay_server"]
MODEL = "tiny-model"  # the model name the harnesses ask the fake model for
# deepeval 4.3 pins click below 8.4, which huggingface-hub 2 (transformers 5) refuses: it
# cannot join the harness extra, so it runs from a venv of its own (no torch either way)
DEEPEVAL = "deepeval==4.3.1"
_INHERITED_NOT = ("OPENAI_", "INSPECT_", "REPLAY_SERVER_", "LITELLM_", "FAKE_")


def offline_env(home: Path) -> dict[str, str]:
    """A harness's environment: every hub switched off, a throwaway HF_HOME, nothing but
    127.0.0.1, and no OpenAI/inspect settings inherited from the caller but a dummy key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_NOT)
           and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_EVALUATE_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", DO_NOT_TRACK="1",
               HF_HOME=str(home / "hf"), NO_PROXY="127.0.0.1,localhost",
               no_proxy="127.0.0.1,localhost", TOKENIZERS_PARALLELISM="false",
               INSPECT_DISPLAY="plain", LITELLM_LOCAL_MODEL_COST_MAP="True",
               # a dummy key, as users set one (the recorder also copes with none: lm-eval
               # then sends `Bearer `, see tests/web/test_recorder.py)
               OPENAI_API_KEY="test-key")
    return env


def note(title: str, lines: Sequence[str]) -> None:
    text = f"## {title}\n" + "".join(f"{line}\n" for line in lines)
    if path := os.environ.get("REPLAY_HARNESS_TRANSCRIPT"):
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)


@dataclass
class Ran:
    args: list[str]
    code: int
    output: str  # stdout and stderr, interleaved as printed


def run(title: str, args: Sequence[str], env: dict[str, str], cwd: Path,
        printed: str = r"^\|") -> Ran:
    """Run a command to its end; note it with the lines of its output matching `printed`."""
    p = subprocess.run(list(args), env=env, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    scores = [line.rstrip() for line in p.stdout.splitlines() if re.search(printed, line)]
    note(title, [f"$ {shlex.join(args)}", f"(exit status {p.returncode})", *scores])
    return Ran(list(args), p.returncode, p.stdout)


class Service:
    """A `replay-server serve|record` running in the background (see `service`): `url` is
    its /v1 base URL, `lines` its log as it comes."""

    def __init__(self, spawned: Spawned) -> None:
        self.url = spawned.url
        self.lines = spawned.lines

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(self.url.removesuffix("/v1") + "/replay/status").json()
        return body


@contextmanager
def service(*args: str) -> Iterator[Service]:
    """`replay-server ARGS --port 0` in the background, noted; then stopped as a user does
    (Ctrl-C), which it must end with exit status 0."""
    note("background", [f"$ {shlex.join([*REPLAY, *args, '--port', '0'])} &"])
    with spawn(*args) as spawned:
        yield Service(spawned)
        assert spawned.stop() == 0, spawned.output


def all_hit(status: dict[str, Any]) -> dict[str, int]:
    """The totals of /replay/status, checked: requests answered, no replay error, every
    saved sample used."""
    totals: dict[str, int] = status["totals"]
    errors = {k: v for k, v in totals.items() if k.startswith("replay_") and v}
    assert not errors and not status["rejected"], status
    assert totals["hits"] > 0 and totals["unused_samples"] == 0, status
    return totals
