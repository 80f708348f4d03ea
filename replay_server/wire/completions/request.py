"""A completions request: the checks it must pass, and its keyed prompts (a batch is keyed
prompt by prompt, so a replay hits whatever batch size the harness uses)."""

from __future__ import annotations

from typing import Any

from ...errors import BadRequest
from ..choices.request import n_asked
from .fields import TABLE


def is_token_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )


def split_prompts(prompt: Any) -> list[str | list[int]] | None:
    """The prompts of a completion request, one by one; None if `prompt` has no valid form.

    Accepted: a string, a list of token ids, a list of strings, a list of token-id lists.
    """
    if isinstance(prompt, str) or is_token_ids(prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(is_token_ids(p) for p in prompt):
            return list(prompt)
    return None


def check(data: dict[str, Any]) -> None:
    prompt = data.get("prompt")
    if prompt is None:
        raise BadRequest("`prompt` is required", param="prompt")
    if split_prompts(prompt) is None:
        raise BadRequest("`prompt` must be a string, a list of strings, a list of token ids "
                         "or a list of token-id lists, and not empty", param="prompt")


def prompt(one: str | list[int], request: dict[str, Any]) -> dict[str, Any]:
    """The keyed prompt of one prompt of a request (the other key fields come from it)."""
    return TABLE.prompt(request, {"prompt": one})


def prompts(request: dict[str, Any], previous: dict[str, Any] | None = None
            ) -> list[dict[str, Any]] | None:
    """One keyed prompt per prompt of the request; None when `prompt` has no valid form."""
    split = split_prompts(request.get("prompt"))
    return None if split is None else [prompt(p, request) for p in split]


def choices_asked(request: dict[str, Any]) -> int:
    """How many choices a whole answer to `request` has: `n` per prompt (a batch: a list
    of strings or of token-id lists)."""
    prompt = request.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        return n_asked(request) * len(prompt)
    return n_asked(request)
