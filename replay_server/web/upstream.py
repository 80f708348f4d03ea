"""The judge path (`serve`/`run --upstream URL --out FILE`): a request for a model the
saved runs do not have goes to the upstream through the recorder, and each exchange
delivered to the client is appended to FILE as native records.

The candidate's generations come from the saved run; a judge's prompts are new. Which
request goes is the Replayer's decision (`Replayer.forwards`: never a model a saved run
answers to, aliases included); how it goes, and what is saved, is the recorder's one
implementation (`Recorder.exchange`), the same `record` uses: whole lines, fsynced before
the client sees the end, streams saved with their frames, a client that gave up leaves
nothing. What became of each forwarded request is counted by the Replayer
(`Replayer.forwarded`), apart from what was replayed.
"""

from __future__ import annotations

from pathlib import Path

from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from ..replay.replayer import Replayer
from ..saved.writer import RecordWriter
from ..settings import Settings
from .recorder import Recorder


def recorder_for(settings: Settings) -> Recorder | None:
    """The recorder `--upstream` and `--out` ask for (None: neither is set). The caller
    closes its writer."""
    if settings.upstream is None or settings.out is None:
        return None
    return Recorder(settings.upstream, RecordWriter(Path(settings.out)),
                    upstream_key=settings.upstream_api_key, pass_keys=False)


class Upstream:
    """Forwards one replay endpoint's request, read whole, and counts its outcome."""

    def __init__(self, recorder: Recorder, replayer: Replayer) -> None:
        self.recorder = recorder
        self.replayer = replayer

    async def forward(self, scope: Scope, receive: Receive, send: Send, endpoint: str,
                      body: bytes, model: str) -> None:
        def outcome(name: str, why: str) -> None:
            self.replayer.forwarded(endpoint, body, model, name, why)

        query = scope.get("query_string", b"").decode("latin-1")
        response = await self.recorder.exchange("POST", endpoint, Headers(scope=scope),
                                                query, body, receive, outcome)
        await response(scope, receive, send)
