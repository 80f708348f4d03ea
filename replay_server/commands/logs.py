"""Where every command's log lines go: stderr, each URL in them shown without its
credentials (`wire.credentials.ScrubbedFormatter`), at any level. A storage client's debug
line or traceback quotes the URLs it fetches whole, userinfo and signature included; and
botocore logs where it found credentials (info) and every request's signed headers
(debug), so its loggers stay at warning.
"""

from __future__ import annotations

import logging
import sys

from ..wire.credentials import ScrubbedFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET = ("httpx", "botocore", "aiobotocore")  # request lines; credentials' whereabouts


def log_to_stderr(level: str) -> None:
    """Log at `level` (debug, info, warning, error) to stderr, without credentials."""
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(ScrubbedFormatter(FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[stderr])
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
