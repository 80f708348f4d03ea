"""guarded.OneSend: a response's head leaves with its body, in one send, and nothing else
changes: the same bytes in the same order, and a head with no body yet is not held back
past the current step of the event loop. (What the protocol guards against is tested
through the front door, in test_http.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

from replay_server.web.guarded import OneSend

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"


class Recording:
    """A transport that records its writes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def write_eof(self) -> None:
        self.writes.append(b"<eof>")

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> Any:
        return f"extra {name}"


def run(steps: Any) -> list[bytes]:
    """`steps(transport)` in a running loop, then one more step of it; the writes made."""
    async def main() -> list[bytes]:
        recording = Recording()
        sent = OneSend(recording, asyncio.get_running_loop())  # type: ignore[arg-type]
        await steps(sent, recording)
        await asyncio.sleep(0)
        return recording.writes

    return asyncio.run(main())


def test_a_head_and_its_body_leave_in_one_write() -> None:
    async def steps(sent: OneSend, recording: Recording) -> None:
        sent.write(HEAD)
        sent.write(b"{}")
        sent.write(HEAD)
        sent.write(b"[]")

    assert run(steps) == [HEAD + b"{}", HEAD + b"[]"]


def test_a_head_whose_body_is_not_ready_leaves_at_the_end_of_the_step() -> None:
    async def steps(sent: OneSend, recording: Recording) -> None:
        sent.write(HEAD)
        assert recording.writes == []
        await asyncio.sleep(0)
        assert recording.writes == [HEAD]  # not waiting for the body
        sent.write(b"data: 1\n\n")

    assert run(steps) == [HEAD, b"data: 1\n\n"]


def test_other_writes_pass_as_they_come_and_a_big_body_is_not_joined() -> None:
    big = b"x" * (1 << 20)

    async def steps(sent: OneSend, recording: Recording) -> None:
        sent.write(b"chunk")
        sent.writelines([b"a", b"b"])
        sent.write(HEAD)
        sent.write(big)

    assert run(steps) == [b"chunk", b"ab", HEAD, big]


def test_closing_sends_a_held_head_first_and_aborting_drops_it() -> None:
    async def steps(sent: OneSend, recording: Recording) -> None:
        sent.write(HEAD)
        sent.write_eof()
        sent.close()
        assert sent.is_closing() and sent.get_extra_info("peername") == "extra peername"

    assert run(steps) == [HEAD, b"<eof>"]

    async def aborted(sent: OneSend, recording: Recording) -> None:
        sent.write(HEAD)
        sent.abort()

    assert run(aborted) == []


def test_the_heads_held_in_one_step_all_leave_at_its_end() -> None:
    async def main() -> tuple[list[bytes], list[bytes]]:
        loop = asyncio.get_running_loop()
        first, second = Recording(), Recording()
        for transport in (first, second):
            OneSend(transport, loop).write(HEAD)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        return first.writes, second.writes

    assert asyncio.run(main()) == ([HEAD], [HEAD])


def test_a_transport_that_fails_to_write_does_not_keep_the_other_heads() -> None:
    class Broken(Recording):
        def write(self, data: bytes) -> None:
            raise RuntimeError("Cannot call write() after write_eof()")

    errors: list[BaseException | None] = []

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda loop, context: errors.append(context.get("exception")))
        broken, fine = Broken(), Recording()
        OneSend(broken, loop).write(HEAD)  # type: ignore[arg-type]
        OneSend(fine, loop).write(HEAD)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        return fine.writes

    assert asyncio.run(main()) == [HEAD]
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
