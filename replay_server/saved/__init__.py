"""Saved runs: the native record (one saved exchange), the readers that turn what each
harness wrote into records, and the files they are read from and written to. Saved files
are only ever read; a bad line is named with its file and line."""
