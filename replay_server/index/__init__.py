"""The index: saved records built into what a replay looks up (model -> key -> entry),
the rules that pick the saved samples for a request, the prompt catalog for misses, and
the on-disk index file. Immutable once built; the only state (cursors) lives with the
replay service."""
