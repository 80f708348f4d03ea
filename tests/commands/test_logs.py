"""`commands/logs.py`: a command's log lines, on stderr, name URLs without credentials."""

from __future__ import annotations

import subprocess
import sys


def test_a_log_line_shows_a_url_without_its_credentials() -> None:
    code = ("import logging; from replay_server.commands.logs import log_to_stderr; "
            "log_to_stderr('debug'); logging.getLogger('fsspec.http').debug("
            "'Retrieve file size for %s', 'https://u:pw@h/r.jsonl?X-Amz-Signature=s&a=1'); "
            "logging.getLogger('botocore.endpoint').debug('signed headers')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stderr.endswith("DEBUG fsspec.http: Retrieve file size for "
                                "https://h/r.jsonl?a=1\n")
