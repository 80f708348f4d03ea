"""A real S3-compatible server: moto's server mode (`python -m moto.server`), started as a
process of its own on a free 127.0.0.1 port and stopped by its PID whatever happened; and a
client (boto3) that makes buckets and uploads files to it.

`S3.env` is what a process that reads from it sets, as a user of MinIO or moto does:
`AWS_ENDPOINT_URL` (read by botocore, so by s3fs), a key pair, a region. The secret key is
a marker that the tests look for in every output: it must never be shown.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import free_port

SECRET = "sEcReT-mArKeR-9f3a"  # AWS_SECRET_ACCESS_KEY: found in no output, ever


def need_moto() -> None:
    """Skip without moto and s3fs (the `objects-test` extra); in CI, fail."""
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
        import s3fs  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI"):
            pytest.fail(f"needs the objects-test extra: {e}")
        pytest.skip(f"needs the objects-test extra (moto[server], s3fs, boto3): {e}")


class S3:
    """A running moto server: its endpoint, the environment that reaches it, its log."""

    def __init__(self, endpoint: str, log: Path) -> None:
        self.endpoint = endpoint
        self.log = log
        self.env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1"}

    def client(self) -> Any:
        import boto3
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key=SECRET)

    def bucket(self, name: str, files: dict[str, bytes]) -> None:
        """Make bucket `name` (once) and upload `files` (key: bytes) to it."""
        client = self.client()
        if name not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
            client.create_bucket(Bucket=name)
        for key, data in files.items():
            client.put_object(Bucket=name, Key=key, Body=data)
        client.close()

    def gets(self, bucket: str) -> int:
        """How many objects of `bucket` were downloaded so far (GETs of a key, as moto's
        request log has them: listings are GETs of the bucket with a query)."""
        return sum(1 for line in self.log.read_text().splitlines()
                   if f'"GET /{bucket}/' in line and "?" not in line.split('"')[1])


class Quiet:
    """A progress bar that shows nothing (what `fetch` is given off a terminal)."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def reading(s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process (its s3fs) reads from `s3`, with its cache in `tmp_path`."""
    import s3fs
    for name, value in {**s3.env, "REPLAY_SERVER_CACHE": str(tmp_path / "c")}.items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()  # fsspec's: one made for another server


@contextmanager
def s3_server(tmp_path: Path, denying: bool = False) -> Iterator[S3]:
    """moto's S3 server on a free 127.0.0.1 port, until the block ends; `denying`: with
    its access control on from the first request, so that the tests' keys are refused
    (403), as a real store refuses keys that may not read."""
    need_moto()
    env = {**os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if denying else {})}
    port = free_port()
    log = tmp_path / "moto.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                 "-p", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                cwd=tmp_path, start_new_session=True, env=env)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=2)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"moto did not start:\n{log.read_text()}") from None
                time.sleep(0.1)
        yield S3(endpoint, log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
