"""What the two choices-based families (chat and completions) share, once: their common
request fields and options, the reply body assembled from saved choices, the framing of
their streams out, and the aggregation of their streams in. Each family adds its own
fields, prompt, deltas and delta merge (`chat/`, `completions/`)."""
