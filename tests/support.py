"""Test helpers: record builders, a real uvicorn on a free port, and the error-shape check."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvicorn

from replay_server import indexing
from replay_server.app import create_app
from replay_server.index import Index
from replay_server.records import CHAT_PATH, COMPLETION_PATH, Record, validate
from replay_server.server import open_run
from replay_server.settings import Settings

MODEL = "test/model"


def chat_response(*texts: str | None, finish: str = "stop", usage: Any = "auto",
                  rid: str = "chatcmpl-1", **message: Any) -> dict[str, Any]:
    choices = [{"index": i, "message": {"role": "assistant", "content": t, **message},
                "logprobs": None, "finish_reason": finish} for i, t in enumerate(texts)]
    if usage == "auto":
        usage = {"prompt_tokens": 10, "completion_tokens": 2 * len(texts),
                 "total_tokens": 10 + 2 * len(texts)}
    return {"id": rid, "object": "chat.completion", "created": 1700000000, "model": MODEL,
            "choices": choices, "usage": usage, "system_fingerprint": "fp-test"}


def completion_response(*texts: str, finish: str = "stop", usage: Any = "auto",
                        rid: str = "cmpl-1") -> dict[str, Any]:
    choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": finish}
               for i, t in enumerate(texts)]
    if usage == "auto":
        usage = {"prompt_tokens": 5, "completion_tokens": 3 * len(texts),
                 "total_tokens": 5 + 3 * len(texts)}
    return {"id": rid, "object": "text_completion", "created": 1700000000, "model": MODEL,
            "choices": choices, "usage": usage}


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def chat_record(messages: list[dict[str, Any]] | str, response: dict[str, Any] | None,
                *, model: str = MODEL, instance: Any = None, file: str = "saved.jsonl",
                line: int = 1, unusable: str | None = None, **request: Any) -> Record:
    if isinstance(messages, str):
        messages = user(messages)
    obj = {"replay_record": 1, "endpoint": CHAT_PATH, "model": model,
           "request": {"model": model, "messages": messages, **request},
           "response": response, "unusable": unusable,
           "source": {"file": file, "line": line, "instance": instance}}
    return validate(obj, file, line)


def completion_record(prompt: str | list[int], response: dict[str, Any] | None, *,
                      model: str = MODEL, instance: Any = None, file: str = "saved.jsonl",
                      line: int = 1, **request: Any) -> Record:
    obj = {"replay_record": 1, "endpoint": COMPLETION_PATH, "model": model,
           "request": {"model": model, "prompt": prompt, **request}, "response": response,
           "source": {"file": file, "line": line, "instance": instance}}
    return validate(obj, file, line)


def write_jsonl(path: Path, records: list[Record | dict[str, Any]]) -> Path:
    with path.open("wb") as f:
        for r in records:
            f.write(orjson.dumps(r.to_json() if isinstance(r, Record) else r) + b"\n")
    return path


def build(records: list[Record], **aliases: str) -> Index:
    return indexing.build(records, aliases or None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(app: Any) -> Iterator[str]:
    """A real uvicorn serving `app` on a free 127.0.0.1 port; yields the /v1 base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def serving(paths: list[Path] | list[str], settings: Settings | None = None) -> Iterator[str]:
    """Load saved files the way `serve` does and run them on a real uvicorn."""
    settings = settings or Settings()
    opened = open_run(paths, settings)
    with running(create_app(settings, opened.index)) as url:
        yield url


def assert_error(response: httpx.Response, status: int, code: Any = None,
                 param: Any = "unset") -> dict[str, Any]:
    """Every error the server sends: the OpenAI envelope and x-should-retry: false."""
    assert response.status_code == status, response.text
    assert response.headers["x-should-retry"] == "false"
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code
    if param != "unset":
        assert error["param"] == param
    return dict(error)
