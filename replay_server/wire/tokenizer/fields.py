"""The tokenizer requests' fields (vLLM's `TokenizeCompletionRequest`,
`TokenizeChatRequest`, `DetokenizeRequest`), classified by the one engine (`keys.Field`).

A tokenizer answer is a function of the model's tokenizer and the request, so every field
that changes vLLM's answer is *key* (the text or messages, whether special tokens are
added, the template and what it renders, `return_token_strs`, which adds `token_strs`),
and only `model`, which selects the saved run, is ignored. There are no sampling
parameters: nothing is *strict*. A field vLLM does not read (its models ignore unknown
fields) changes nothing and is not keyed.
"""

from __future__ import annotations

from .. import keys
from ..chat.fields import messages, tools
from ..keys import IGNORED, KEY, field, verbatim

TOKENIZE_KIND = "tokenize"
TOKENIZE_CHAT_KIND = "tokenize_chat"
DETOKENIZE_KIND = "detokenize"
TOKENIZER_INFO_KIND = "tokenizer_info"

_MODEL = field("model", IGNORED, "string", "selects the saved run (see --model-alias)")
_TOKEN_STRS = field("return_token_strs", KEY, "boolean", "the answer also holds each "
                    "token's string (`token_strs`)", unset=(False,))

TOKENIZE = keys.Table(TOKENIZE_KIND, (
    field("prompt", KEY, "string", "the text tokenized"),
    field("add_special_tokens", KEY, "boolean", "special tokens (BOS) added; on by "
          "default for a prompt", unset=(True,)),
    _TOKEN_STRS,
    _MODEL,
), own=())
"""`POST /tokenize` with a `prompt`."""

TOKENIZE_CHAT = keys.Table(TOKENIZE_CHAT_KIND, (
    field("messages", KEY, "array", "the conversation rendered by the chat template, then "
          "tokenized", form=messages),
    field("add_generation_prompt", KEY, "boolean", "the assistant turn is opened",
          unset=(True,)),
    field("continue_final_message", KEY, "boolean", "the last message is left open",
          unset=(False,)),
    field("add_special_tokens", KEY, "boolean", "special tokens (BOS) added on top of the "
          "template's; off by default for messages", unset=(False,)),
    field("chat_template", KEY, "string", "the template that renders the messages",
          form=verbatim),
    field("chat_template_kwargs", KEY, "object", "template variables", unset=({},),
          form=verbatim),
    field("tools", KEY, "array", "tool definitions rendered by the template", unset=([],),
          form=tools),
    field("media_io_kwargs", KEY, "object", "how media in the messages are loaded",
          unset=({},), form=verbatim),
    field("mm_processor_kwargs", KEY, "object", "how media become prompt tokens",
          unset=({},), form=verbatim),
    _TOKEN_STRS,
    _MODEL,
), own=())
"""`POST /tokenize` with `messages`."""

DETOKENIZE = keys.Table(DETOKENIZE_KIND, (
    field("tokens", KEY, "array", "the token ids decoded", items="integer"),
    _MODEL,
), own=())
"""`POST /detokenize`."""

TOKENIZER_INFO = keys.Table(TOKENIZER_INFO_KIND, (), own=())
"""`GET /tokenizer_info`: no request fields; its answer is the tokenizer's config."""
