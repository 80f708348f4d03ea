"""The error of a miss: no saved generation for the prompt, and where the nearest saved
prompt first differs from it (message index, role, character offset), said without quoting
prompt text, which some harnesses pattern-match: the quoted excerpts go to the error's
detail (`/replay/misses`, the log, `run`'s report)."""

from __future__ import annotations

from typing import Any

from ..errors import NoMatch
from ..index.index import Index, entry_of
from ..wire import keys
from ..wire.difference import system_variants
from ..wire.families import family_of


def no_match(index: Index, model: str, endpoint: str, prompt: dict[str, Any]) -> NoMatch:
    """The miss error of `prompt` (a keyed prompt) for saved model `model`."""
    family = family_of(endpoint)
    what = family.prompt_field
    message = f"no saved generation for this prompt (model `{model}`, {endpoint})."
    found = index.catalog(model, prompt["kind"]).nearest(keys.canonical(prompt))
    detail: dict[str, Any] = {"nearest": None, "difference": None}
    if found is None:
        message += f" Model `{model}` has no saved prompt for this endpoint."
    else:
        saved, where = _same_doc(index, model, prompt, found[0]) or found
        difference = family.difference(prompt, saved)
        detail = {"nearest": where, "difference": difference.describe(),
                  "difference_quoted": difference.describe(quote=True),
                  "difference_group": difference.group(),
                  "first_difference": difference.to_json()}
        message += f" Nearest saved prompt: {where}; first difference: " \
                   f"{difference.describe()}."
    message += (" Check that the harness, task, prompt template and chat template match "
                "the saved run; `replay-server inspect` lists what is saved.")
    error = NoMatch(message, param=what)
    error.detail = detail
    return error


def _same_doc(index: Index, model: str, asked: dict[str, Any], near: dict[str, Any]
              ) -> tuple[dict[str, Any], str] | None:
    """The saved prompt that is the request but for its leading system message (added,
    left out or reworded: the commonest template drift), when there is one. The nearest
    prompt by prefix is then another document that happens to share the system text;
    this one is the same document, so the miss says what really differs."""
    for variant in system_variants(asked, near):
        value = index.select(model).entries.get(keys.key_of(variant))
        if value is not None:
            entry = entry_of(value)
            instance = (entry.instances or entry.unusable)[0]
            return variant, instance.where
    return None
