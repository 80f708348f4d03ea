"""writes.StepWrites: what a connection writes in one step of the event loop leaves at its
end, in one call and in order; nothing is held past that step, closing sends it first, and
a connection gone by then gets nothing. (Every kind of answer through a real uvicorn, with
the batching on, is tested in test_http.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn.server import ServerState

from replay_server.web import listen
from replay_server.web.guarded import GuardedProtocol
from replay_server.web.writes import StepWrites

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"


class Recording:
    """A transport that records each call that sends bytes (one entry a call)."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "a write after close"
        self.calls.append(data)

    def writelines(self, data: list[bytes]) -> None:
        assert not self.closed, "a write after close"
        self.calls.append(b"".join(data))

    def write_eof(self) -> None:
        self.calls.append(b"<eof>")

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 5

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 9), "sockname": ("127.0.0.1", 8)}.get(name, default)


Steps = Callable[[StepWrites, Recording], Awaitable[None]]


def run(steps: Steps) -> list[bytes]:
    """`steps(writes, transport)` in a running loop, then one more step; the sends made."""
    async def main() -> list[bytes]:
        recording = Recording()
        writes = StepWrites(recording, asyncio.get_running_loop())  # type: ignore[arg-type]
        await steps(writes, recording)
        await asyncio.sleep(0)
        return recording.calls

    return asyncio.run(main())


def test_the_writes_of_one_step_leave_at_its_end_in_one_call_in_order() -> None:
    async def steps(writes: StepWrites, recording: Recording) -> None:
        writes.write(HEAD)
        writes.write(b"{}")
        writes.writelines([HEAD, b"", b"[]"])
        assert recording.calls == []  # (not yet: the step has not ended)
        assert writes.get_write_buffer_size() == 5 + 2 * len(HEAD) + 4

    assert run(steps) == [HEAD + b"{}" + HEAD + b"[]"]


def test_nothing_is_held_past_the_step_it_was_written_in() -> None:
    async def steps(writes: StepWrites, recording: Recording) -> None:
        writes.write(HEAD)
        await asyncio.sleep(0)
        assert recording.calls == [HEAD]  # a stream's head does not wait for its events
        writes.write(b"data: 1\n\n")
        await asyncio.sleep(0)
        writes.write(b"data: 2\n\n")

    assert run(steps) == [HEAD, b"data: 1\n\n", b"data: 2\n\n"]


def test_closing_sends_what_is_held_first_and_aborting_drops_it() -> None:
    async def closed(writes: StepWrites, recording: Recording) -> None:
        writes.write(HEAD)
        writes.write(b"{}")
        writes.write_eof()
        writes.close()
        assert writes.is_closing() and writes.get_extra_info("peername") == ("127.0.0.1", 9)

    assert run(closed) == [HEAD + b"{}", b"<eof>"]

    async def aborted(writes: StepWrites, recording: Recording) -> None:
        writes.write(HEAD)
        writes.abort()

    assert run(aborted) == []


def test_a_connection_closed_before_the_step_ends_gets_nothing() -> None:
    async def gone(writes: StepWrites, recording: Recording) -> None:
        writes.write(HEAD)
        recording.close()  # the client left: the transport closed under the protocol

    assert run(gone) == []


def test_when_sent_hears_whether_what_was_written_left() -> None:
    """Told once the step's writes left (True), or could not (False: the connection
    closed first, or nothing was written, as when the server dropped an answer for a
    client already gone); a close in the step waits for the writes, and for the telling."""
    heard: list[bool] = []

    async def steps(writes: StepWrites, recording: Recording) -> None:
        writes.write(HEAD)
        writes.when_sent(heard.append)
        assert heard == []  # (not yet)
        await asyncio.sleep(0)
        writes.write(HEAD)
        writes.close()  # as uvicorn closes once the last answer of a connection is sent
        assert writes.is_closing() and not recording.closed
        writes.when_sent(heard.append)
        await asyncio.sleep(0)
        assert recording.closed
        writes.when_sent(heard.append)  # nothing written since

    assert run(steps) == [HEAD, HEAD]
    assert heard == [True, True, False]

    async def gone(writes: StepWrites, recording: Recording) -> None:
        writes.write(HEAD)
        writes.when_sent(heard.append)
        recording.close()

    heard.clear()
    assert run(gone) == [] and heard == [False]

    async def aborted(writes: StepWrites, recording: Recording) -> None:
        writes.write(HEAD)
        writes.when_sent(heard.append)
        writes.abort()

    heard.clear()
    assert run(aborted) == [] and heard == [False]


def test_uvicorns_head_and_body_of_an_answer_leave_in_one_send() -> None:
    """Through the protocol every server here runs (uvicorn's, guarded): one request in,
    one send out, holding the whole answer, once the loop's step ends."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})

    async def main() -> list[bytes]:
        config = listen.uvicorn_config(app, "warning", access_log=False)
        config.load()
        protocol = GuardedProtocol(config, ServerState(), {}, asyncio.get_running_loop())
        recording = Recording()
        protocol.connection_made(recording)  # type: ignore[arg-type]
        protocol.data_received(b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\n\r\n")
        for _ in range(5):  # the app's task, then the end of its step
            await asyncio.sleep(0)
        protocol.connection_lost(None)
        return recording.calls

    calls = asyncio.run(main())
    assert len(calls) == 1, calls
    assert calls[0].startswith(b"HTTP/1.1 200 OK\r\n") and calls[0].endswith(b"\r\n\r\n{}")
