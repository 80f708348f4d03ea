"""Saved-run readers, one module each; `READERS` is the registry the loader asks in order."""

from __future__ import annotations

from .base import LoadContext, Reader
from .native import NativeReader
from .openai_batch import OpenAIBatchReader

READERS: list[Reader] = [NativeReader(), OpenAIBatchReader()]

__all__ = ["READERS", "LoadContext", "Reader"]
