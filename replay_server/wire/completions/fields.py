"""The completions request (`/v1/completions`): every field of the OpenAI API and of vLLM's
extras, classified (`keys.Field`). The prompt is keyed as sent, one prompt at a time (a
batch is looked up prompt by prompt): a string and token ids never match each other."""

from __future__ import annotations

from .. import keys
from ..choices import fields as shared
from ..keys import KEY, STRICT, field, verbatim

KIND = "completion"

FIELDS = (
    # --- what the model sees
    field("prompt", KEY, "string|array", "the text or token ids the model continues (a "
          "batch is keyed prompt by prompt)"),
    field("suffix", KEY, "string", "the text after the insertion point (fill-in-the-middle)",
          form=verbatim),
    field("add_special_tokens", KEY, "boolean", "vLLM: special tokens (BOS) added to the "
          "prompt; on by default for completions", unset=(True,)),
    *shared.SEES,
    field("prompt_embeds", KEY, "string|array", "vLLM: the prompt as embeddings",
          form=verbatim),
    # --- what the model may emit
    *shared.EMITS,
    # --- what the server returns for the same generation
    field("echo", KEY, "boolean", "the prompt is returned in front of the answer",
          unset=(False,)),
    *shared.RETURNS,
    # --- how the model samples, and where it stops: compared with --strict
    *shared.SAMPLING,
    field("logprobs", STRICT, "integer", "how many token logprobs are returned"),
    # --- transport and bookkeeping
    *shared.TRANSPORT,
)

TABLE = keys.Table(KIND, FIELDS, own=("prompt",))
