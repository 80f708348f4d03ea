"""`replay-server compare`: certify a rescoring, verdict by verdict.

Reads two scored runs (`verdicts`: one reader per harness, registered here), pairs their
instances (`pairing`: by the harness's own ids, or through `run --report`'s record of
which saved exchange answered each rescored request), and reports per task and metric
what agrees, each flipped verdict and the paired statistics (`outcome`, `stats`), as a
table, JSON or one HTML page (`render`, `html`). `command.compare` is what the CLI calls.
Adding a harness is adding one reader module and listing it in `READERS`.
"""

from __future__ import annotations

from . import evalscope, inspect_ai, lighteval, lm_eval, oe_eval, olmo_eval
from .verdicts import Reader

READERS: list[Reader] = [lm_eval, inspect_ai, olmo_eval, oe_eval, lighteval, evalscope]

__all__ = ["READERS", "Reader"]
