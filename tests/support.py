"""Test helpers: record builders, a real uvicorn on a free port, the `replay-server`
command in the background, the error-shape check, and the documentation as the site shows it."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import orjson
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from replay_server.commands.serve import open_run
from replay_server.index import builder as indexing
from replay_server.index import file as index_file
from replay_server.index import loading
from replay_server.index.index import Index
from replay_server.paths import CHAT_PATH, COMPLETION_PATH, GEMINI_PATH, MESSAGES_PATH
from replay_server.saved.record import Record, validate
from replay_server.settings import Settings
from replay_server.web import listen
from replay_server.web.app import create_app

MODEL = "test/model"
ROOT = Path(__file__).parent.parent
CLI = [sys.executable, "-m", "replay_server"]


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


def user(text: str) -> list[Any]:
    """One user message: a saved request's `messages`, or the openai client's."""
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


def tokenizer_record(endpoint: str, request: dict[str, Any], response: dict[str, Any], *,
                     model: str = MODEL, line: int = 1) -> Record:
    """A recorded tokenizer exchange (`/tokenize`, `/detokenize`, `/tokenizer_info`)."""
    obj = {"replay_record": 1, "endpoint": endpoint, "model": model, "request": request,
           "response": response, "source": {"file": "saved.jsonl", "line": line}}
    return validate(obj, "saved.jsonl", line)


def message_response(*blocks: dict[str, Any] | str, stop: str | None = "end_turn",
                     rid: str = "msg_01", usage: Any = "auto") -> dict[str, Any]:
    """An Anthropic Messages answer: its blocks (a string is a text block)."""
    content = [{"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]
    if usage == "auto":
        usage = {"input_tokens": 12, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0, "output_tokens": 7, "service_tier": "standard"}
    return {"id": rid, "type": "message", "role": "assistant", "model": MODEL,
            "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}


def message_record(messages: list[dict[str, Any]] | str, response: dict[str, Any] | None,
                   *, model: str = MODEL, line: int = 1, endpoint: str = MESSAGES_PATH,
                   stream: list[str] | None = None, **request: Any) -> Record:
    if isinstance(messages, str):
        messages = user(messages)
    obj: dict[str, Any] = {
        "replay_record": 1, "endpoint": endpoint, "model": model,
        "request": {"model": model, "messages": messages, **request}, "response": response,
        "unusable": None if response is not None else "failed",
        "source": {"file": "saved.jsonl", "line": line}}
    if stream is not None:
        obj["stream"] = stream
    return validate(obj, "saved.jsonl", line)


def gemini_response(*texts: str, finish: str | None = "STOP", usage: Any = "auto",
                    rid: str = "resp-1", **candidate: Any) -> dict[str, Any]:
    """A Gemini GenerateContentResponse: one candidate per text (a text part each)."""
    candidates = [{"content": {"parts": [{"text": t}], "role": "model"}, "index": i,
                   **({"finishReason": finish} if finish else {}), **candidate}
                  for i, t in enumerate(texts)]
    if usage == "auto":
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 2 * len(texts),
                 "totalTokenCount": 10 + 2 * len(texts)}
    out: dict[str, Any] = {"candidates": candidates}
    if usage is not None:
        out["usageMetadata"] = usage
    return {**out, "modelVersion": MODEL, "responseId": rid}


def gemini_contents(text: str) -> list[Any]:
    """One user turn: a Gemini request's `contents`."""
    return [{"role": "user", "parts": [{"text": text}]}]


def gemini_record(contents: list[dict[str, Any]] | str, response: dict[str, Any] | None,
                  *, model: str = MODEL, line: int = 1, endpoint: str = GEMINI_PATH,
                  stream: list[str] | None = None, instance: Any = None,
                  **request: Any) -> Record:
    """A saved Gemini exchange (its request as the body: the model is the path's)."""
    if isinstance(contents, str):
        contents = gemini_contents(contents)
    obj: dict[str, Any] = {
        "replay_record": 1, "endpoint": endpoint, "model": model,
        "request": {"contents": contents, **request}, "response": response,
        "unusable": None if response is not None else "failed",
        "source": {"file": "saved.jsonl", "line": line, "instance": instance}}
    if stream is not None:
        obj["stream"] = stream
    return validate(obj, "saved.jsonl", line)


def write_jsonl(path: Path, records: Sequence[Record | dict[str, Any]]) -> Path:
    with path.open("wb") as f:
        for r in records:
            f.write(orjson.dumps(r.to_json() if isinstance(r, Record) else r) + b"\n")
    return path


def build(records: list[Record], **aliases: str) -> Index:
    return indexing.build(records, aliases or None)


def wait_for(condition: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition never became true")
        time.sleep(0.01)


VENVS = Path.home() / ".cache" / "replay-server"


def venv_python(name: str, *requirements: str, without: tuple[str, ...] = ()) -> str:
    """The python of a venv with `requirements` (created once per machine, then reused),
    for a client whose pins clash with the project's other test dependencies, or a
    harness too heavy to be one; `without`: packages left out though a requirement
    depends on them (an override no platform matches: crfm-helm's torch, which its API
    clients never import). Made under a lock: test runs of other checkouts on the machine
    share it."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    marker = venv / (".installed-" + "-".join([*requirements, *without]).replace("/", "_"))
    VENVS.mkdir(parents=True, exist_ok=True)
    with open(VENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            uv = Path(sys.executable).parent / "uv"  # the dev extra's, as the Makefile's
            subprocess.run([str(uv), "venv", "--quiet", "--clear", "--python", sys.executable,
                            str(venv)], check=True, timeout=300)
            overrides = VENVS / f"{name}.overrides.txt"
            overrides.write_text("".join(f"{p}; sys_platform == 'never'\n" for p in without))
            subprocess.run([str(uv), "pip", "install", "--quiet", "--python", str(python),
                            "--override", str(overrides), *requirements], check=True,
                           timeout=900)
            marker.touch()
    return str(python)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Counting:
    """Counts the requests that reach the server, to prove clients did not retry; and keeps
    what each carried besides its body (`heard`: its headers, lower-case names, and its
    query string), to prove what a proxy in front sent on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[str] = []
        self.heard: list[tuple[list[tuple[str, str]], str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append(scope["path"])
            self.heard.append(([(k.decode("latin-1"), v.decode("latin-1"))
                                for k, v in scope["headers"]],
                               scope["query_string"].decode("latin-1")))
        await self.app(scope, receive, send)


@contextmanager
def on_free_port(config: uvicorn.Config) -> Iterator[int]:
    """A real uvicorn run with `config` on a free 127.0.0.1 port, in a thread; yields the
    port."""
    server = uvicorn.Server(config)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while not server.started:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise RuntimeError("uvicorn did not start")
                time.sleep(0.01)
            yield sock.getsockname()[1]
        finally:
            server.should_exit = True
            thread.join(10)


@contextmanager
def running(app: Any) -> Iterator[str]:
    """A real uvicorn serving `app` on a free 127.0.0.1 port; yields the /v1 base URL."""
    # as serve runs it: guarded (the read timeout, trailers kept out of the headers)
    with on_free_port(listen.uvicorn_config(app, "warning", access_log=False)) as port:
        yield f"http://127.0.0.1:{port}/v1"


@contextmanager
def serving(paths: list[Path] | list[str], settings: Settings | None = None) -> Iterator[str]:
    """Load saved files the way `serve` does and run them on a real uvicorn."""
    settings = settings or Settings()
    opened = open_run(paths, settings)
    with running(create_app(settings, opened.index, tokenizer=opened.tokenizer)) as url:
        yield url


class Spawned:
    """A `replay-server` command running in the background (see `spawn`). Its stdout and
    stderr are read as they come, into `lines`, so that its logging never blocks it."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None) -> None:
        self.proc = subprocess.Popen(
            argv, cwd=cwd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
            start_new_session=True)  # its own process group: worker processes go with it
        self.lines: list[str] = []
        self.url = ""  # the /v1 base URL of its "ready on URL" line
        self.ended = False
        self.ready = threading.Event()  # set on the ready line, or when output ends
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if not self.url and (found := re.search(r"ready on (http://\S+/v1)$", line)):
                self.url = found[1]
                self.ready.set()
        self.ready.set()

    @property
    def base(self) -> str:
        """The server's root URL (without /v1)."""
        return self.url.removesuffix("/v1")

    @property
    def output(self) -> str:
        """What it printed so far; all of it once it has ended (`wait`, `stop`)."""
        return "".join(self.lines)

    def wait(self, timeout: float = 30) -> int:
        """Wait for it to end (killed, with every process it started, after `timeout`
        seconds: then AssertionError with what it printed); its exit status."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self._reader.join(10)
            raise AssertionError(f"did not end within {timeout} s; it printed:\n"
                                 f"{self.output}") from None
        finally:
            # the reader ends once every process holding the pipe has; the pipe is closed
            # only then (closing a file that another thread reads waits for that read)
            self._reader.join(10)
            assert self.proc.stdout is not None
            if not self._reader.is_alive():
                self.proc.stdout.close()
            self.ended = True

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        """Send `sig` (unless it has ended already) and wait for it; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)


@contextmanager
def spawn(*argv: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
          timeout: float = 30) -> Iterator[Spawned]:
    """`replay-server ARGV --port 0` in the background, once it says "ready on URL".
    Whatever the test leaves running is interrupted (SIGINT) and waited for at the end."""
    spawned = Spawned([*CLI, *argv, "--port", "0"], cwd, env)
    try:
        if not spawned.ready.wait(timeout) or not spawned.url:
            spawned.stop(signal.SIGKILL)
            raise AssertionError(f"{' '.join(argv)}: no ready line\n{spawned.output}")
        yield spawned
    finally:
        if not spawned.ended:
            spawned.stop()


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


def docs_hook() -> ModuleType:
    """docs/hooks/reference.py, the MkDocs hook, as mkdocs loads it: from its path."""
    spec = importlib.util.spec_from_file_location("reference", ROOT / "docs/hooks/reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUNNABLE = "# runs as pasted, from the repository's root"


def runnable_blocks(page: Path) -> list[str]:
    """The shell blocks of a docs page whose first line is RUNNABLE, as the page prints
    them: the commands docs/recipes/ promise to run as pasted (tests/test_recipes.py)."""
    blocks = re.findall(r"^```(?:sh|bash)\n(.*?)^```$", page.read_text(encoding="utf-8"),
                        re.M | re.S)
    return [block for block in blocks if block.startswith(RUNNABLE + "\n")]


def docs_page(name: str) -> str:
    """The page docs/NAME as the site shows it: what the hook generates rendered in it
    (`index.md` is the README, which the site shows as its home page)."""
    hook = docs_hook()
    if name == "index.md":
        return str(hook.home_page())
    return str(hook.render((ROOT / "docs" / name).read_text(), name))


def damaged_answer(i: int) -> str:
    return f"answer {i}: " + "lorem ipsum " * 250  # 3 KB: some five answers a page


def damaged_index(tmp_path: Path, damage: str) -> Path:
    """An index of 120 saved prompts, damaged in place as a bad copy or a disk fault
    leaves it: four bytes of answer 57's text overwritten, or the whole 16 KiB page that
    holds answer 90 filled with random bytes."""
    saved = write_jsonl(tmp_path / "run.jsonl", [
        chat_record(f"question {i}", chat_response(damaged_answer(i)), line=i + 1)
        for i in range(120)])
    index = tmp_path / "run.idx"
    index_file.write(loading.load([saved], progress=False), index)
    data = bytearray(index.read_bytes())
    if damage == "an answer's bytes":
        at = data.index(b"answer 57: ") + 40
        data[at:at + 4] = b"QQQQ"
    else:
        at = data.index(b"answer 90: ") // 16384 * 16384
        data[at:at + 16384] = random.Random(0).randbytes(16384)
    index.write_bytes(bytes(data))
    return index
