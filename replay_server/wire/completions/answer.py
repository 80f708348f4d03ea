"""A saved completions exchange: its request holds one prompt (a recorded batch is saved
prompt by prompt: `split`), and its response is choices of texts (`choices/answer.py`),
an empty string being an answer."""

from __future__ import annotations

from typing import Any

from ..answer import BadAnswer
from ..choices import answer as choices
from .request import is_token_ids, split_prompts

# (request, response, batch) of one prompt of a batched exchange; batch: the record's
# `batch`, {"id", "index", "size", "usage"}, or None for a request of one prompt.
Part = tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]


def saved_request(request: dict[str, Any]) -> None:
    prompt = request.get("prompt")
    if not (isinstance(prompt, str) or is_token_ids(prompt)):
        raise BadAnswer("prompt", "expected one prompt: a string or a list of token ids "
                        "(a batch is saved as one record per prompt)")


def saved_answer(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    return choices.saved_answer(body, "text", _unusable)


def _unusable(choice: dict[str, Any], message: Any) -> str | None:
    return None if isinstance(choice.get("text"), str) else "saved text is null or missing"


def split(request: dict[str, Any], response: dict[str, Any] | None, batch_id: str
          ) -> list[Part]:
    """One part per prompt of a batched exchange (a single prompt is its own part, with no
    batch, and so is a batch of one: `[[ids]]`, `["text"]`, as lm-eval sends its last
    batch, whose choices and usage are that prompt's); `response` None: the requests alone
    (a failed exchange).

    Choice `prompt_index * n + j` goes to prompt `prompt_index`. The batch's `usage` covers
    every prompt together and cannot be split, so each part's usage is null, and each
    part's batch, `{"id": batch_id, "index", "size", "usage"}`, keeps the batch's usage,
    which a replay of the same batch serves again. ValueError: the choices do not split
    evenly over the prompts."""
    prompts = split_prompts(request.get("prompt"))
    if prompts is None:
        return [(request, response, None)]
    if len(prompts) == 1:
        return [({**request, "prompt": prompts[0]}, response, None)]
    if response is None:
        return [({**request, "prompt": prompt}, None, None) for prompt in prompts]
    choices_ = sorted(response.get("choices") or [], key=lambda c: c.get("index", 0))
    n = len(choices_) // len(prompts)
    if n == 0 or n * len(prompts) != len(choices_):
        raise ValueError(f"{len(choices_)} choices do not split evenly over {len(prompts)} "
                         "prompts")
    parts: list[Part] = []
    for i, prompt in enumerate(prompts):
        mine = [{**c, "index": j} for j, c in enumerate(choices_[i * n:(i + 1) * n])]
        batch = {"id": batch_id, "index": i, "size": len(prompts),
                 "usage": response.get("usage")}
        parts.append(({**request, "prompt": prompt},
                      {**response, "choices": mine, "usage": None}, batch))
    return parts
