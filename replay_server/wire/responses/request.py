"""A Responses API request: the checks it must pass, its keyed prompt, and what a later
turn continuing its response (`previous_response_id`) is keyed with."""

from __future__ import annotations

from typing import Any

from ...errors import BadRequest
from .fields import TABLE, item


class NeedsPrevious(ValueError):
    """The request continues a stored response (`previous_response_id`), and the caller
    did not say what that response's conversation was."""


def check(data: dict[str, Any]) -> None:
    if data.get("input") is None:
        raise BadRequest("`input` is required", param="input")


def previous_id(request: dict[str, Any]) -> str | None:
    """The saved response a request continues (`previous_response_id`), if any."""
    found = request.get("previous_response_id")
    return found if isinstance(found, str) else None


def output_items(response: dict[str, Any]) -> list[Any]:
    """A response's output as a later turn's prompt holds it: normalised like input items,
    item `id`s left out (the model never sees them, and a replay may have answered the
    earlier turn with another instance's identical generation under other ids)."""
    out = []
    for value in response.get("output") or []:
        normal = item(value)
        if isinstance(normal, dict):
            normal = {k: v for k, v in normal.items() if k != "id"}
        out.append(normal)
    return out


def previous_of(keyed: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """What `previous_response_id` pointing at `response` puts before a request's input:
    `keyed` (the keyed prompt of the request that `response` answered, its own previous
    turns included) and the response's `output_items`. Instructions of that earlier
    request are kept although OpenAI does not carry them over: a different earlier turn
    is never the same conversation."""
    return {"request": keyed, "output": output_items(response)}


def keyed_input(request: dict[str, Any], previous: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """The keyed prompt of a Responses request: `{"v", "kind": "responses", "input":
    [items], "previous"?: {...}, <key fields>}`, normalised (`fields`).

    `previous` is required when the request has a `previous_response_id` (else
    `NeedsPrevious`): `previous_of(<keyed_input of the request that the id's response
    answered>, <that response>)`. The id itself is never keyed: it names what a server
    stored, and a replay serving an identical generation of another instance hands out
    another id for the same conversation.
    """
    own: dict[str, Any] = {"input": TABLE.normal("input", request.get("input"))}
    if request.get("previous_response_id") is not None:
        if previous is None:
            raise NeedsPrevious("the request continues response "
                                f"{request['previous_response_id']!r}: its conversation is "
                                "needed for the key")
        own["previous"] = previous
    return TABLE.prompt(request, own)


def prompts(request: dict[str, Any], previous: dict[str, Any] | None = None
            ) -> list[dict[str, Any]]:
    """The one keyed prompt of a Responses request (see `keyed_input`)."""
    return [keyed_input(request, previous)]
