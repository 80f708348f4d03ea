"""Saved runs in object storage (`saved/objects.py`): every command takes `s3://` and
`http(s)://` URLs beside local paths, through a real S3-compatible server (moto's, a
process of its own) and a real HTTP server on 127.0.0.1; a second start fetches nothing, a
changed object is fetched again, every failure names the URL and no credential is shown."""

from __future__ import annotations

import http.server
import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from replay_server import errors
from replay_server.errors import LoadError, show_as, shown_file, where_of
from replay_server.saved import objects
from replay_server.saved.formats.base import LoadContext
from tests.parts.s3 import S3, SECRET, reading, s3_server
from tests.support import CLI, MODEL, chat_response, free_port, spawn


def line(text: str, answer: str) -> bytes:
    """A native record with no source of its own: its file and line are where it was read."""
    return orjson.dumps({"replay_record": 1, "endpoint": "/v1/chat/completions",
                         "model": MODEL, "request": {"model": MODEL, "messages": [
                             {"role": "user", "content": text}]},
                         "response": chat_response(answer)}) + b"\n"


RUN = line("What is 2+2?", "4") + line("Name a colour.", "blue")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


def cli(s3: S3, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`replay-server ARGS` reading from `s3` with the cache in `tmp_path`; nothing it
    prints holds the secret key."""
    done = subprocess.run([*CLI, *args], env=environ(s3, tmp_path), capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert SECRET not in done.stdout + done.stderr
    return done


def indexed(s3: S3, tmp_path: Path, url: str) -> Path:
    """`replay-server index URL -o tmp_path/run.idx`, built; the secret key is not in it."""
    index = tmp_path / "run.idx"
    assert cli(s3, tmp_path, "index", url, "-o", str(index)).returncode == 0
    assert SECRET not in index.read_bytes().decode("latin-1")
    return index


def environ(s3: S3 | None, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, **(s3.env if s3 else {}), "REPLAY_SERVER_CACHE": str(tmp_path / "c")}


def ask(base: str, text: str) -> tuple[str, str]:
    """The saved answer to `text` and the `x-replay-source` it came from."""
    reply = httpx.post(f"{base}/chat/completions", timeout=30, json={
        "model": MODEL, "messages": [{"role": "user", "content": text}]})
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"], reply.headers["x-replay-source"]


@contextmanager
def served(s3: S3 | None, tmp_path: Path, *paths: str) -> Iterator[Any]:
    with spawn("serve", *paths, env=environ(s3, tmp_path), timeout=120) as server:
        yield server
    assert SECRET not in server.output


# -- what needs no server --------------------------------------------------------------

def test_a_url_is_told_from_a_path() -> None:
    assert objects.is_url("s3://bucket/run.jsonl") and objects.is_url("https://h/r.jsonl")
    assert not objects.is_url("runs/s3:/bucket") and not objects.is_url(Path("s3://b/k"))


def test_a_missing_filesystem_package_names_what_to_install() -> None:
    pytest.importorskip("fsspec")
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    with pytest.raises(LoadError, match=r"gs://bucket/run.jsonl: .*pip install gcsfs"):
        objects.filesystem("gs://bucket/run.jsonl")


def test_the_cache_is_where_the_environment_says(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.delenv("REPLAY_SERVER_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert objects.cache_dir() == tmp_path / "replay-server" / "objects"
    monkeypatch.setenv("REPLAY_SERVER_CACHE", str(tmp_path / "mine"))
    assert objects.cache_dir() == tmp_path / "mine" / "objects"


def test_a_cached_copy_is_named_by_its_url_in_errors(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setattr(errors, "_SHOWN", {})
    view = str(tmp_path / "view")
    show_as(view, "s3://bucket/prefix")
    assert str(LoadError(f"{view}/run.jsonl", 17, "bad")) == "s3://bucket/prefix/run.jsonl:17: bad"
    assert shown_file(f"{view}2/run.jsonl") == f"{view}2/run.jsonl"  # not under it


def test_a_skipped_row_of_a_cached_copy_is_named_by_its_url(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    """`index s3://runs/lm_eval/` said "skipped 6 row(s) ... (e.g. ~/.cache/.../views/...)":
    the cached copy, which the user never gave and cannot look at."""
    monkeypatch.setattr(errors, "_SHOWN", {})
    view = str(tmp_path / "view")
    show_as(view, "s3://bucket/prefix")
    ctx = LoadContext()
    ctx.skip("row repeats a doc", where_of(f"{view}/samples.jsonl", 7, "task:0"))
    assert ctx.skipped_examples == {
        "row repeats a doc": ["s3://bucket/prefix/samples.jsonl:7 (task:0)"]}


# -- s3:// through a real moto server ----------------------------------------------------


@pytest.mark.slow
def test_serve_from_a_prefix_answers_as_the_local_file_and_starts_again_from_the_cache(
        s3: S3, tmp_path: Path) -> None:
    s3.bucket("serve", {"runs/a/run.jsonl": RUN, "runs/a/.hidden.jsonl": b"not json\n"})
    local = tmp_path / "run.jsonl"
    local.write_bytes(RUN)
    with served(None, tmp_path, str(local)) as server:
        expected = ask(server.url, "Name a colour.")[0]
    for fetched in (1, 0):
        with served(s3, tmp_path, "s3://serve/runs/a/") as server:
            assert ask(server.url, "Name a colour.") == (expected, "s3://serve/runs/a/run.jsonl:2")
        assert f"1 from object storage, {fetched} fetched, {1 - fetched} from the cache" \
            in server.output
        assert s3.gets("serve") == 1  # the second start fetched nothing
        assert ("these files were indexed before" in server.output) == (not fetched)


@pytest.mark.slow
def test_a_changed_object_is_fetched_again_and_an_index_of_it_is_stale(
        s3: S3, tmp_path: Path) -> None:
    s3.bucket("change", {"run.jsonl": RUN})
    index = indexed(s3, tmp_path, "s3://change/run.jsonl")
    assert "s3://change/run.jsonl" in index.read_bytes().decode("latin-1")
    with served(s3, tmp_path, str(index)) as server:
        assert ask(server.url, "What is 2+2?") == ("4", "s3://change/run.jsonl:1")
    with served(s3, tmp_path, "s3://change/run.jsonl") as server:
        assert ask(server.url, "What is 2+2?")[0] == "4"
    s3.bucket("change", {"run.jsonl": line("What is 2+2?", "four")})
    with served(s3, tmp_path, "s3://change/run.jsonl") as server:
        assert ask(server.url, "What is 2+2?")[0] == "four"
    assert s3.gets("change") == 2
    # the index of the object's old content is gone with it (the same URL: the same inputs)
    assert len(list((tmp_path / "c" / "indexes").glob("*.idx"))) == 1
    stale = cli(s3, tmp_path, "serve", str(index))
    assert stale.returncode == 2
    assert "s3://change/run.jsonl (changed)" in stale.stderr


@pytest.mark.slow
def test_an_index_file_in_a_bucket_is_fetched_and_served(s3: S3, tmp_path: Path) -> None:
    s3.bucket("idx", {"runs/run.jsonl": RUN})
    index = indexed(s3, tmp_path, "s3://idx/runs/")
    s3.bucket("idx", {"index/run.idx": index.read_bytes()})
    with served(s3, tmp_path, "s3://idx/index/run.idx") as server:
        assert ask(server.url, "Name a colour.") == ("blue", "s3://idx/runs/run.jsonl:2")
    assert "opened index s3://idx/index/run.idx" in server.output
    with served(s3, tmp_path, "s3://idx/index/run.idx", "--workers", "2") as server:
        assert ask(server.url, "What is 2+2?") == ("4", "s3://idx/runs/run.jsonl:1")


@pytest.mark.slow
def test_run_convert_and_inspect_read_a_prefix(s3: S3, tmp_path: Path) -> None:
    s3.bucket("cmds", {"p/run.jsonl": RUN})
    harness = ("import openai; c = openai.OpenAI(max_retries=0); print(c.chat.completions."
               "create(model='test/model', messages=[{'role': 'user', 'content': "
               "'What is 2+2?'}]).choices[0].message.content)")
    ran = cli(s3, tmp_path, "run", "s3://cmds/p/", "--allow-unused", "--", sys.executable, "-c",
              harness)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "4"
    out = tmp_path / "out.jsonl"
    assert cli(s3, tmp_path, "convert", "s3://cmds/p", "-o", str(out)).returncode == 0
    sources = [orjson.loads(r)["source"]["file"] for r in out.read_bytes().splitlines()]
    assert sources == ["s3://cmds/p/run.jsonl"] * 2
    shown = cli(s3, tmp_path, "inspect", "s3://cmds/p/", str(out))
    assert "  s3://cmds/p/run.jsonl  (native)" in shown.stdout
    assert "1 from object storage, 0 fetched, 1 from the cache" in shown.stdout


@pytest.mark.slow
@pytest.mark.parametrize("command", [["inspect"], ["convert", "-o", "out.jsonl"],
                                     ["index", "-o", "out.idx"], ["serve"]])
def test_a_missing_object_or_bucket_is_exit_2_naming_the_url(
        s3: S3, tmp_path: Path, command: list[str]) -> None:
    s3.bucket("there", {"run.jsonl": RUN})
    for url in ("s3://there/gone.jsonl", "s3://no-such-bucket/run.jsonl", "s3://there/none/"):
        done = cli(s3, tmp_path, command[0], url, *command[1:])
        assert done.returncode == 2
        assert f"error: {url}: no such object, prefix or bucket" in done.stderr


@pytest.mark.slow
def test_no_credentials_or_no_endpoint_says_which_variables_to_set(
        s3: S3, tmp_path: Path) -> None:
    """The two mistakes of a first `index s3://...` against MinIO or moto: botocore's own
    words ("Unable to locate credentials", "Could not connect to the endpoint URL") do
    not say what replay-server reads."""
    s3.bucket("hints", {"run.jsonl": RUN})
    bare = {name: value for name, value in environ(s3, tmp_path).items()
            if not name.startswith("AWS_")}
    nowhere = {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
               "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"}
    closed = f"http://127.0.0.1:{free_port()}"
    for env, said in ((s3.env | {"AWS_ACCESS_KEY_ID": ""}, "NoCredentialsError"),
                      (s3.env | {"AWS_ENDPOINT_URL": closed}, "EndpointConnectionError")):
        done = subprocess.run([*CLI, "index", "s3://hints/run.jsonl", "-o", "out.idx"],
                              env={**bare, **nowhere, **{k: v for k, v in env.items() if v}},
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 2
        assert said in done.stderr
        assert ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" if said.startswith("No")
                else "check AWS_ENDPOINT_URL") in done.stderr, done.stderr


@pytest.mark.slow
def test_a_denied_read_is_exit_2_naming_the_url(tmp_path: Path) -> None:
    with s3_server(tmp_path, denying=True) as denying:
        done = cli(denying, tmp_path, "index", "s3://locked/run.jsonl", "-o", "out.idx")
    assert done.returncode == 2
    assert done.stderr.startswith("error: s3://locked/run.jsonl: access denied")


@pytest.mark.slow
def test_a_bad_line_in_an_object_is_named_by_its_url_and_line(s3: S3, tmp_path: Path) -> None:
    s3.bucket("bad", {"p/run.jsonl": RUN + b'{"replay_record": 1}\n'})
    done = cli(s3, tmp_path, "inspect", "s3://bad/p/")
    assert done.returncode == 2
    assert "error: s3://bad/p/run.jsonl:3: field `endpoint`" in done.stderr


@pytest.mark.slow
def test_concurrent_starts_share_the_cache(s3: S3, tmp_path: Path) -> None:
    s3.bucket("many", {f"p/run{i}.jsonl": line(f"q{i}", f"a{i}") for i in range(5)})
    starts = [subprocess.Popen([*CLI, "inspect", "s3://many/p/"], env=environ(s3, tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(3)]
    for start in starts:
        out, err = start.communicate(timeout=120)
        assert start.returncode == 0, err
        assert "model test/model: 5 records" in out
    assert not list((tmp_path / "c").rglob("*.part"))


@pytest.mark.slow
def test_a_url_ending_in_a_slash_is_the_prefix_even_beside_an_object_of_its_name(
        s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reading(s3, tmp_path, monkeypatch)
    s3.bucket("both", {"run": b"an object\n", "run/run.jsonl": RUN, "runs/x.jsonl": RUN,
                       "solo": RUN})
    listed = objects.listing("s3://both/run/")
    assert listed.prefix and [o.url for _, _, o in listed.objects] == ["s3://both/run/run.jsonl"]
    assert [o.url for _, _, o in objects.listing("s3://both/run").objects] == ["s3://both/run"]
    with pytest.raises(LoadError, match=r"^s3://both/solo/: no such object, prefix or bucket"):
        objects.listing("s3://both/solo/")


@pytest.mark.slow
def test_a_hidden_object_named_by_its_url_is_read(s3: S3, tmp_path: Path) -> None:
    s3.bucket("hid", {".run.jsonl": RUN})
    done = cli(s3, tmp_path, "inspect", "s3://hid/.run.jsonl")
    assert done.returncode == 0, done.stderr
    assert "  s3://hid/.run.jsonl  (native)" in done.stdout


# -- http(s):// through a real HTTP server ---------------------------------------------------

class Files(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; and two downloads cut short: `/cut.jsonl` promises more bytes than
    it sends, `/short.jsonl` is listed (HEAD) longer than the whole body it sends (an
    object cut by a proxy, or replaced between the listing and the download)."""

    def do_GET(self) -> None:
        if not self.short():
            super().do_GET()
            return
        self.wfile.write(RUN)
        self.close_connection = True

    def do_HEAD(self) -> None:
        if not self.short():
            super().do_HEAD()

    def short(self) -> bool:
        """Whether this is one of the two, its head sent."""
        name = self.path.partition("?")[0]
        if name not in ("/cut.jsonl", "/short.jsonl"):
            return False
        self.send_response(200)
        whole = self.command == "HEAD" or name == "/cut.jsonl"
        self.send_header("Content-Length", str(len(RUN) + 100 if whole else len(RUN)))
        self.end_headers()
        return True

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def http_files(folder: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             partial(Files, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.slow
def test_an_http_url_is_served_and_shown_without_its_credentials(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "run.jsonl").write_bytes(RUN)
    with http_files(tmp_path / "www") as root:
        secret = root.replace("://", f"://user:{SECRET}@") + f"/run.jsonl?token={SECRET}"
        with served(None, tmp_path, secret) as server:
            assert ask(server.url, "What is 2+2?") == ("4", f"{root}/run.jsonl:1")
    assert SECRET not in server.output


@pytest.mark.slow
def test_debug_logs_show_no_credential_of_a_url(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "run.jsonl").write_bytes(RUN)
    with http_files(tmp_path / "www") as root:
        secret = root.replace("://", f"://user:{SECRET}@")
        for name in ("run.jsonl", "gone.jsonl"):
            done = subprocess.run([*CLI, "run", "--log-level", "debug", "--allow-unused",
                                   f"{secret}/{name}?X-Amz-Signature={SECRET}", "--", "true"],
                                  env=environ(None, tmp_path), capture_output=True, text=True,
                                  timeout=120)
            assert f"{root}/{name}" in done.stdout + done.stderr
            assert SECRET not in done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cut.jsonl", "short.jsonl"])
def test_a_cut_download_is_never_used(tmp_path: Path, name: str) -> None:
    pytest.importorskip("fsspec")
    with http_files(tmp_path) as root:
        cut = subprocess.run([*CLI, "inspect", f"{root}/{name}?key={SECRET}"],
                             env=environ(None, tmp_path), capture_output=True, text=True,
                             timeout=120)
    assert cut.returncode == 2
    assert cut.stderr.startswith(f"error: {root}/{name}: ")
    assert SECRET not in cut.stderr
    assert not [p for p in (tmp_path / "c").rglob("*") if p.is_file()]  # nothing kept


@pytest.mark.slow
def test_an_index_whose_objects_cannot_be_listed_here_says_so_and_serves(
        s3: S3, tmp_path: Path) -> None:
    s3.bucket("away", {"run.jsonl": RUN})
    index = indexed(s3, tmp_path, "s3://away/")
    elsewhere = {**s3.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
                 "AWS_MAX_ATTEMPTS": "1"}
    with spawn("serve", str(index), env={**environ(s3, tmp_path), **elsewhere},
               timeout=120) as server:
        assert ask(server.url, "What is 2+2?") == ("4", "s3://away/run.jsonl:1")
    assert "warning: the objects it was built from cannot be listed here (s3://away/: cannot " \
        "read it: EndpointConnectionError" in server.output
    assert SECRET not in server.output
