"""The batch protocols' service, framework-free: what a batch API keeps and how a batch is
answered. `store.py` holds the uploaded files and the batches in the serving process
(nothing is written to disk; a size cap and a count cap) and answers a batch's lines, each
one through the `Replayer` exactly as a single request to its endpoint is (the same key,
the same samples rules, the same reply bytes, counted and logged the same); `openai.py`
and `anthropic.py` are the two APIs' calls over it, in their shapes (`wire/batches/`).

A batch is answered whole when it is created, so it has ended at its first poll.
"""

from .anthropic import AnthropicBatches
from .openai import OpenAIBatches
from .store import Store

__all__ = ["AnthropicBatches", "OpenAIBatches", "Store"]
