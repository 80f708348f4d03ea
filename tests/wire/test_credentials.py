"""What carries a key: header and query names, and URLs as they may be stored or printed."""

from __future__ import annotations

import pytest

from replay_server.wire.credentials import (
    key_like,
    query_without_keys,
    scrubbed,
    shown,
    without_keys,
)


@pytest.mark.parametrize("name", [
    "Authorization", "x-api-key", "X-Api-Key", "api-key", "x-goog-api-key", "key", "apikey",
    "api_key", "access_token", "x-auth-token", "cookie", "x-amz-security-token", "sig",
    "client_secret", "password"])
def test_names_that_carry_a_key(name: str) -> None:
    assert key_like(name)


@pytest.mark.parametrize("name", [
    "anthropic-version", "anthropic-beta", "openai-organization", "openai-project",
    "user-agent", "keep-alive", "content-type", "accept", "api-version",
    "x-stainless-retry-count", "x-request-id", "model"])
def test_names_that_do_not(name: str) -> None:
    assert not key_like(name)


def test_headers_and_queries_lose_only_their_keys() -> None:
    assert without_keys({"Authorization": "Bearer k", "x-api-key": "k",
                         "anthropic-version": "2023-06-01"}) == {
        "anthropic-version": "2023-06-01"}
    assert query_without_keys("key=k&api-version=2024-02-01&access%5Ftoken=t&a=%20b") == \
        "api-version=2024-02-01&a=%20b"
    assert query_without_keys("") == ""


@pytest.mark.parametrize("url, expected", [
    ("http://user:secret@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("https://tok@host", "https://host"),
    ("http://u:p@ss@host/v1?key=k&api-version=2", "http://host/v1?api-version=2"),
    ("http://host:1?access_token=t", "http://host:1"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
])
def test_a_url_is_shown_without_its_credentials(url: str, expected: str) -> None:
    assert shown(url) == expected


def test_every_url_in_a_text_is_shown_without_its_credentials() -> None:
    text = ("404, message='Not Found', url='http://u:pw@h:1/r.jsonl?X-Amz-Signature=s&a=1' "
            "(via s3://k:pw@b/p) http://[broken?sig=s")
    assert scrubbed(text) == ("404, message='Not Found', url='http://h:1/r.jsonl?a=1' "
                              "(via s3://b/p) http://...")
