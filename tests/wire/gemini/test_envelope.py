"""Google's error envelope, its model list and model: what the SDK reads."""

from __future__ import annotations

import pytest

from replay_server.errors import (
    BadRequest,
    ModelNotFound,
    NoMatch,
    ReplayServerError,
    Unauthorized,
)
from replay_server.wire.gemini.envelope import error_body
from replay_server.wire.gemini.models import model_body, models_body


@pytest.mark.parametrize(("error", "code", "status"), [
    (NoMatch("no saved generation"), 400, "INVALID_ARGUMENT"),
    (BadRequest("`contents` is required"), 400, "INVALID_ARGUMENT"),
    (ModelNotFound("gemini-x", ["gemini-y"]), 404, "NOT_FOUND"),
    (Unauthorized("missing key"), 401, "UNAUTHENTICATED"),
    (ReplayServerError("boom"), 500, "INTERNAL"),
])
def test_every_error_is_googles_envelope(error: ReplayServerError, code: int,
                                         status: str) -> None:
    body = error_body(error)
    assert body == {"error": {"code": code, "message": body["error"]["message"],
                              "status": status}}
    assert error.message in body["error"]["message"]


def test_a_replay_decision_says_its_code_first() -> None:
    assert error_body(NoMatch("no saved"))["error"]["message"] == "replay_no_match: no saved"


def test_the_model_list_says_only_what_the_saved_run_knows() -> None:
    assert models_body([("gemini-a", None), ("gemini-b", 8192)], 0) == {"models": [
        model_body("gemini-a", None), model_body("gemini-b", 8192)]}
    assert model_body("gemini-b", 8192) == {
        "name": "models/gemini-b", "displayName": "gemini-b", "inputTokenLimit": 8192,
        "supportedGenerationMethods": ["generateContent", "countTokens"]}
    assert "inputTokenLimit" not in model_body("gemini-a", None)
