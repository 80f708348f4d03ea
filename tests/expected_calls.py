"""Play a data dir's expected_requests.jsonl / expected_errors.jsonl against a real server.

Each line is one call the harness makes when rescoring: `{"path", "request", "expect":
{"texts", "finish_reasons"}}` (finish_reasons null: every one is null) or `{"path",
"request", "expect_error": {"status", "code"}}`. Lines are played in file order, which is
the saved order of repeats.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from replay_server.index.loading import load
from replay_server.saved.formats import LoadContext
from replay_server.saved.loader import read
from replay_server.saved.record import Record
from replay_server.settings import Settings
from tests.support import assert_error, serving


def expected(run: Path, name: str) -> list[dict[str, Any]]:
    path = run / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def texts(endpoint: str, body: dict[str, Any]) -> list[str]:
    if endpoint.endswith("/chat/completions"):
        return [c["message"]["content"] for c in body["choices"]]
    return [c["text"] for c in body["choices"]]


def play(run: Path, settings: Settings | None = None) -> int:
    """Make every expected call against a server on `run`; returns how many were made."""
    calls = expected(run, "expected_requests.jsonl")
    errors = expected(run, "expected_errors.jsonl")
    with serving([run], settings) as url, httpx.Client(base_url=url.removesuffix("/v1")) as http:
        for call in calls:
            got = http.post(call["path"], json=call["request"])
            assert got.status_code == 200, (call["source"], got.text)
            body = got.json()
            assert texts(call["path"], body) == call["expect"]["texts"], call["source"]
            reasons = [c["finish_reason"] for c in body["choices"]]
            want = call["expect"]["finish_reasons"] or [None] * len(reasons)
            assert reasons == want, call["source"]
        for call in errors:
            wanted = call["expect_error"]
            assert_error(http.post(call["path"], json=call["request"]), wanted["status"],
                         wanted["code"])
    return len(calls) + len(errors)


def records_by_source(run: Path) -> dict[tuple[str, int, int], Record]:
    """Every record of a run by (predictions file name, doc_id, idx)."""
    out = {}
    for record in read(load([run], progress=False).plan, LoadContext()):
        doc = int(str(record.source["instance"]).rsplit(":", 1)[1])
        out[Path(record.source["file"]).name, doc, record.source.get("idx", 0)] = record
    return out


def unmatched_bodies(run: Path) -> list[Any]:
    """The expected calls whose exact body no record holds (none, when the reader is right)."""
    records = records_by_source(run)
    wrong = []
    for call in expected(run, "expected_requests.jsonl") + expected(run, "expected_errors.jsonl"):
        source = call["source"]
        record = records.get((Path(source["file"]).name, source["doc_id"], source.get("idx", 0)))
        if record is not None and record.request != call["request"]:
            wrong.append(source)
        elif record is None and call.get("expect_error", {}).get("code") != "replay_no_match":
            wrong.append(source)
    return wrong
