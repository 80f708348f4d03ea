"""The replay service: one request body in, one reply out (`Replayer.handle`), what was
served and missed (`Stats`), and the error of a miss (`miss`). Framework-free: the web
layer calls it with bytes."""
