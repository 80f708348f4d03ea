"""A saved Responses exchange: its request holds an `input`, and its response is a
response object whose `output` items are its answer (an empty `output` too: vLLM leaves
out the message of an empty text), unless the response failed or was saved before it was
done."""

from __future__ import annotations

from typing import Any

import orjson

from ..answer import BadAnswer, generation_id, typed_list
from ..json_types import type_name
from .request import output_items

# A saved answer with one of these statuses is not an answer (it failed, or was saved
# before it was done).
_NOT_DONE = frozenset({"failed", "cancelled", "queued", "in_progress"})


def saved_request(request: dict[str, Any]) -> None:
    if not isinstance(request.get("input"), str | list):
        raise BadAnswer("input", "expected a string or a list of input items")


def saved_answer(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The body, checked for shape; and why it is not an answer, or None."""
    for i, item in enumerate(typed_list(body, "output", "an item object")):
        for name in ("content", "summary"):
            if item.get(name) is not None and not isinstance(item[name], list):
                raise BadAnswer(f"output[{i}].{name}", "expected a list of parts or null")
    status = body.get("status")
    if status is not None and not isinstance(status, str):
        raise BadAnswer("status", f"expected a string or null, got {type_name(status)}")
    if status in _NOT_DONE:
        error = body.get("error")
        why = f": {orjson.dumps(error).decode()[:200]}" if error else ""
        return body, f"the saved response's status is {status!r}{why}"
    return body, None


def generations(body: dict[str, Any]) -> list[bytes]:
    """A response is one generation: its output items without their ids (which the model
    never chose: two servers answering alike hand out other ids), its status and why it is
    incomplete. Call ids are kept: a later turn echoes them, so they are part of what was
    said."""
    return [generation_id({"output": output_items(body), "status": body.get("status"),
                           "incomplete_details": body.get("incomplete_details")})]
