"""Where a Gemini request goes: every path form Google serves is the one endpoint, the
model from the path, `:streamGenerateContent` streamed, `alt` its framing."""

from __future__ import annotations

import pytest

from replay_server.wire.gemini import address

GENERATE = {"model": "gemini-2.5-flash", "stream": False}


@pytest.mark.parametrize(("path", "query", "fields"), [
    ("/v1/models/gemini-2.5-flash:generateContent", "", GENERATE),
    ("/v1beta/models/gemini-2.5-flash:generateContent", "key=k", GENERATE),
    ("/v1alpha/models/gemini-2.5-flash:generateContent", "", GENERATE),
    ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", "alt=sse",
     {**GENERATE, "stream": True, "alt": "sse"}),
    ("/v1/models/gemini-2.5-flash:streamGenerateContent", "",
     {**GENERATE, "stream": True}),
    ("/v1beta1/projects/p/locations/us-central1/publishers/google/models/"
     "gemini-2.5-flash:generateContent", "", GENERATE),
    ("/v1/publishers/google/models/gemini-2.5-flash:generateContent", "", GENERATE),
    ("/v1beta/models/org/name:generateContent", "", {"model": "org/name", "stream": False}),
])
def test_every_path_form_is_the_one_endpoint(path: str, query: str,
                                             fields: dict[str, object]) -> None:
    assert address.generate_fields(path, query) == fields
    assert address.count_fields(path, query) is None


@pytest.mark.parametrize("path", [
    "/v1beta/models/gemini-2.5-flash:countTokens",
    "/v1beta1/projects/p/locations/l/publishers/google/models/gemini-2.5-flash:countTokens",
])
def test_count_tokens_paths(path: str) -> None:
    assert address.count_fields(path, "") == {"model": "gemini-2.5-flash"}
    assert address.generate_fields(path, "") is None


@pytest.mark.parametrize("path", [
    "/v1beta/models/gemini-2.5-flash:embedContent",  # a method the replay has not
    "/v2/models/gemini-2.5-flash:generateContent",  # a version Google has not
    "/v1beta/models/:generateContent",
    "/v1beta/models/gemini-2.5-flash",
    "/v1/chat/completions",
])
def test_other_paths_are_no_endpoint(path: str) -> None:
    assert address.generate_fields(path, "") is None
    assert address.count_fields(path, "") is None


@pytest.mark.parametrize(("path", "query", "google"), [
    ("/v1beta/models", "", True),
    ("/v1beta/anything", "", True),
    ("/v1beta1/publishers/google/models", "", True),
    ("/v1/publishers/google/models/m", "", True),
    ("/v1/models/m:embedContent", "", True),
    ("/v1/models", "key=k", True),
    ("/v1/models", "pageSize=5", True),
    ("/v1/models/m", "key=k", True),
    ("/v1/models", "", False),  # OpenAI's (unless its headers say Google's)
    ("/v1/models/m", "", False),
    ("/v1/chat/completions", "key=k", False),
    ("/v2/models", "key=k", False),
])
def test_a_request_is_googles_by_its_path_and_query(path: str, query: str,
                                                     google: bool) -> None:
    assert address.addressed(path, query) is google


def test_a_request_is_googles_by_its_key_header() -> None:
    assert address.google([(b"x-goog-api-key", b"k")])
    assert not address.google([(b"authorization", b"Bearer k")])
