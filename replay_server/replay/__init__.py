"""The replay service: one request body in, one reply out (`Replayer.handle`), and what
was served and missed (`Stats`). Framework-free: the web layer calls it with bytes."""
