"""`replay-server cache`, and the commands that serve saved files through its indexes
(`serve`, `run`), as real processes with a cache of their own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from replay_server.commands import cache as caching
from replay_server.index.cache import Options, open_cached
from tests.support import CLI, Spawned, chat_record, chat_response, spawn, user, write_jsonl

pytestmark = pytest.mark.http


def _saved(path: Path, records: int = 1) -> Path:
    return write_jsonl(path, [chat_record(f"q{i}", chat_response(f"a{i}"), line=i + 1)
                              for i in range(records)])


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          env=env)


def _env(tmp_path: Path) -> dict[str, str]:
    import os
    return {**os.environ, "REPLAY_SERVER_CACHE": str(tmp_path / "cache")}


def _asked(url: str, question: str) -> str:
    reply = httpx.post(url + "/chat/completions", timeout=30,
                       json={"model": "test/model", "messages": user(question)})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def test_show_and_clear_say_what_the_cache_holds(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLAY_SERVER_CACHE", str(tmp_path / "cache"))
    said: list[str] = []
    assert caching.show(said.append) == 0
    assert said[1] == f"indexes ({tmp_path / 'cache' / 'indexes'}): 0, 0.0 MB"
    saved = _saved(tmp_path / "run.jsonl")
    built = open_cached([saved], Options()).index.path
    said.clear()
    caching.show(said.append)
    assert said[2].startswith(f"  {built.name}: ") and said[3] == f"    from {saved}"
    said.clear()
    assert caching.clear_indexes(said.append) == 0
    assert said[0].startswith(f"removed 1 index(es) from {built.parent}, freed ")
    assert not built.exists()


@pytest.mark.slow
def test_cache_shows_each_index_and_clear_empties_it(tmp_path: Path) -> None:
    env = _env(tmp_path)
    saved = _saved(tmp_path / "run.jsonl")
    with spawn("serve", str(saved), env=env) as server:
        assert _asked(server.url, "q0") == "a0"
    shown = _cli(env, "cache")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()  # (the command's output: stdout)
    assert lines[0] == f"replay-server's cache: {tmp_path / 'cache'}"
    assert re.fullmatch(rf"indexes \({tmp_path / 'cache' / 'indexes'}\): 1, \d+\.\d MB",
                        lines[1]), lines
    assert re.fullmatch(r"  \w+-\w+\.idx: \d+\.\d MB, built .+ UTC, last used .+ UTC",
                        lines[2]), lines
    assert lines[3] == f"    from {saved}"
    cleared = _cli(env, "cache", "--clear")
    assert cleared.returncode == 0
    assert re.match(rf"removed 1 index\(es\) from {tmp_path / 'cache' / 'indexes'}, freed "
                    r"\d+\.\d MB", cleared.stdout), cleared.stderr
    assert list((tmp_path / "cache" / "indexes").iterdir()) == []
    assert ": 0, 0.0 MB" in _cli(env, "cache").stdout


@pytest.mark.slow
def test_two_starts_at_once_both_serve_and_keep_one_index(tmp_path: Path) -> None:
    """Both build (neither finds the other's index half-written), both serve, and the
    cache holds one index after."""
    env = _env(tmp_path)
    saved = _saved(tmp_path / "run.jsonl", 20_000)
    argv = [*CLI, "serve", str(saved), "--port", "0"]
    both = [Spawned(argv, tmp_path, env), Spawned(argv, tmp_path, env)]  # (not one by one)
    try:
        for server in both:
            assert server.ready.wait(120) and server.url, server.output
            assert _asked(server.url, "q19999") == "a19999"
    finally:
        for server in both:
            server.stop()
    assert all(s.proc.returncode == 0 for s in both)
    assert [p.suffix for p in (tmp_path / "cache" / "indexes").iterdir()] == [".idx"]


@pytest.mark.slow
def test_run_serves_through_the_cache_too(tmp_path: Path) -> None:
    env = _env(tmp_path)
    saved = _saved(tmp_path / "run.jsonl")
    ask = ("import openai; print(openai.OpenAI().chat.completions.create(model='test/model', "
           "messages=[{'role': 'user', 'content': 'q0'}]).choices[0].message.content)")
    first, second = (_cli(env, "run", str(saved), "--", sys.executable, "-c", ask)
                     for _ in range(2))
    assert first.returncode == second.returncode == 0, first.stderr
    assert first.stdout == second.stdout == "a0\n"
    assert "replay-server: indexed into the cache: " in first.stderr
    assert "replay-server: these files were indexed before: " in second.stderr


@pytest.mark.slow
def test_a_temporary_index_is_removed_at_exit(tmp_path: Path) -> None:
    """A cache that cannot be written: the index is built into a temporary file, served,
    and gone once the server has stopped."""
    (tmp_path / "a-file").write_text("")
    saved = _saved(tmp_path / "run.jsonl")
    with spawn("serve", str(saved), env={"REPLAY_SERVER_CACHE": str(tmp_path / "a-file/c")}
               ) as server:
        assert _asked(server.url, "q0") == "a0"
        said = re.search(r"cannot be written \(.*\): the index is built into (\S+\.idx), "
                         "removed at exit", server.output)
        assert said is not None, server.output
        assert Path(said[1]).is_file()
        assert server.stop() == 0
    assert not Path(said[1]).exists()


def test_what_a_killed_build_left_is_shown_and_cleared(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A start killed (SIGKILL) while it writes an index leaves the file it was writing
    under its temporary name (`writer.written_whole`'s): the cache's size must count it,
    and --clear remove it."""
    from replay_server.saved import writer
    monkeypatch.setenv("REPLAY_SERVER_CACHE", str(tmp_path / "cache"))
    saved = _saved(tmp_path / "run.jsonl")
    built = open_cached([saved], Options()).index.path
    left = writer._new_beside(built.with_name("0-1.idx"))
    left.write_bytes(b"\0" * 3_000_000)
    said: list[str] = []
    caching.show(said.append)
    assert said[4] == (f"unfinished builds ({built.parent}): 1, 3.0 MB (left by a start "
                       "stopped while it wrote an index; --clear removes them)")
    said.clear()
    caching.clear_indexes(said.append)
    assert said[0].startswith(f"removed 1 index(es) and 1 unfinished build(s) from "
                              f"{built.parent}, freed ")
    assert list(built.parent.iterdir()) == []


@pytest.mark.slow
def test_an_index_being_served_is_kept_by_clear(tmp_path: Path) -> None:
    """`cache --clear` just after a server with workers said it was ready (its workers
    still starting, to open the index by its name): the index in use is kept and said
    so, and the server answers. (Removed, the workers failed to open it and the server
    died.)"""
    env = _env(tmp_path)
    saved = _saved(tmp_path / "run.jsonl")
    with spawn("serve", str(saved), "--workers", "2", env=env) as server:
        cleared = _cli(env, "cache", "--clear")
        assert cleared.stdout.startswith("removed 0 index(es) from "), cleared.stderr
        assert "kept 1 in use by a running server" in cleared.stdout
        assert _asked(server.url, "q0") == "a0"
    assert server.proc.returncode == 0, server.output
    assert _cli(env, "cache", "--clear").stdout.startswith("removed 1 index(es) from ")
