"""The judge path (`serve`/`run --upstream URL --out FILE`): a request for a model the
saved runs do not have goes to the upstream through the recorder, and each exchange
delivered to the client is appended to FILE as native records.

The candidate's generations come from the saved run; a judge's prompts are new. Which
request goes is the Replayer's decision (`Replayer.forwards`: never a model a saved run
answers to, aliases included); how it goes, and what is saved, is the recorder's one
implementation (`Recorder.exchange`), the same `record` uses: whole lines, fsynced before
the client sees the end, streams saved with their frames, a client that gave up leaves
nothing. What became of each forwarded request is counted by the Replayer
(`Replayer.forwarded`), apart from what was replayed, once its answer left or could not
leave (`writes.when_sent`): an answer saved but never delivered (the client left while it
was saved: its timeout fired, and the harness scored the item as failed) is `abandoned`,
though it stays in FILE (it was written before its end could go out).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from ..replay.replayer import Replayer
from ..saved.writer import RecordWriter
from ..settings import Settings
from .recorder import Recorder
from .writes import when_sent


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
        """Forward, answer, and count the outcome once the answer's end left or could not
        leave (`_count`)."""
        heard: list[tuple[str, str]] = []  # the recorder's outcome (saved before its end)
        left: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        ended = False  # the answer's end was sent (a relay cut short sends none)

        def outcome(name: str, why: str) -> None:
            heard.append((name, why))

        def sent(delivered: bool) -> None:
            if not left.done():  # (cancelled: the server is stopping)
                left.set_result(delivered)

        async def sending(message: Message) -> None:
            nonlocal ended
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                ended = True
                when_sent(scope, sent)  # (told at the end of this step of the loop)

        query = scope.get("query_string", b"").decode("latin-1")
        # (the request's own path: a path with parameters in it names the endpoint's model)
        response = await self.recorder.exchange("POST", scope["path"], Headers(scope=scope),
                                                query, body, receive, outcome)
        await response(scope, receive, sending)
        self._count(endpoint, body, model, heard, await left if ended else False)

    def _count(self, endpoint: str, body: bytes, model: str, heard: list[tuple[str, str]],
               delivered: bool) -> None:
        """Count what became of the request: as the recorder heard it, but an answer saved
        and never delivered is `abandoned` (the client never had it)."""
        for name, why in heard:
            if name == "recorded" and not delivered:
                name, why = "abandoned", ("the client left before the answer reached it (it "
                                          "was saved all the same)")
            self.replayer.forwarded(endpoint, body, model, name, why)
