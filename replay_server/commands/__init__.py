"""The commands: one module per `replay-server` command (serve, record, run, inspect,
convert, index), each the function the CLI calls."""
