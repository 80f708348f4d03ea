"""A deterministic fake OpenAI-compatible model server, for tests only."""
