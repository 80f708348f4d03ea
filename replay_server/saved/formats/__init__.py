"""Saved-run readers, one module each; `READERS` is the registry the loader asks in order."""

from __future__ import annotations

from .anthropic_batch import AnthropicBatchReader
from .base import LoadContext, Reader
from .evalscope import EvalscopeReader
from .inspect_ai import InspectAIReader
from .lighteval import LightevalReader
from .lm_eval import LmEvalReader
from .native import NativeReader
from .oe_eval import OeEvalReader
from .olmo_eval import OlmoEvalReader
from .openai_batch import OpenAIBatchReader

READERS: list[Reader] = [NativeReader(), OpenAIBatchReader(), AnthropicBatchReader(),
                          LmEvalReader(), InspectAIReader(), OlmoEvalReader(), OeEvalReader(),
                          LightevalReader(), EvalscopeReader()]

__all__ = ["READERS", "LoadContext", "Reader"]
