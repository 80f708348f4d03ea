"""replay-server: rescore saved LLM generations with any eval harness, with no model and no GPU."""

__version__ = "0.1.0"
