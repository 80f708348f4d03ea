"""Saved-run readers, one module each; `READERS` is the registry the loader asks in order."""

from __future__ import annotations

from .anthropic_batch import AnthropicBatchReader
from .base import LoadContext, Reader
from .evalscope import EvalscopeReader
from .helm import HelmReader
from .inspect_ai import InspectAIReader
from .lighteval import LightevalReader
from .lm_eval import PLACEHOLDER, LmEvalReader
from .native import NativeReader
from .oe_eval import OeEvalReader
from .olmo_eval import OlmoEvalReader
from .openai_batch import OpenAIBatchReader

READERS: list[Reader] = [NativeReader(), OpenAIBatchReader(), AnthropicBatchReader(),
                          LmEvalReader(), InspectAIReader(), OlmoEvalReader(), OeEvalReader(),
                          LightevalReader(), EvalscopeReader(),
                          HelmReader()]

# The environment variables a reader reads: what a load builds depends on their values as
# much as on the files (the index cache keys on them, index/cache.py).
ENVIRONMENT: tuple[str, ...] = (PLACEHOLDER,)

__all__ = ["ENVIRONMENT", "READERS", "LoadContext", "Reader"]
