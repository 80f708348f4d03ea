"""Each command's exit statuses: the codes the commands end with, the list each command's
`--help` ends with (cli.py), and the table of docs/errors.md (generated), from one table.

One module for every command, not a constant in each command's own: `--help` lists them
for every command, and the modules of `serve`, `record` and `run` import the web stack,
which the CLI imports only to run them (`--help` starts at once). A command's statuses are
listed in the order they apply: the first that applies is the one it ends with.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

DONE = 0
SKIPPED = 1  # inspect, convert, index: --skip-bad-lines left lines out (reported)
DIFFER = 1  # compare: a verdict differs, or something is unpaired
BAD = 2  # every command: a bad saved file, option or output path (click's usage errors too)
MISSED = 3  # run: a request got no saved generation
UNUSED = 4  # run: saved samples never asked for
NO_REQUESTS = 5  # run: no request reached the server
UPSTREAM_FAILED = 6  # run: a request forwarded upstream got no answer to save


@dataclass(frozen=True)
class Exit:
    """One exit status of a command (None: COMMAND's own, for `run`) and when."""

    status: int | None
    when: str

    @property
    def label(self) -> str:
        return "COMMAND's own status" if self.status is None else str(self.status)


_STOPPED = Exit(DONE, "stopped by Ctrl-C (SIGINT) or SIGTERM, after the requests in flight")
_SKIPPED = Exit(SKIPPED, "done, but --skip-bad-lines left out some lines (reported)")
_WRITE = (Exit(BAD, "a bad saved file, option or output path (nothing is written)"), _SKIPPED)

EXITS: dict[str, tuple[Exit, ...]] = {
    "serve": (Exit(BAD, "a bad saved file, option or --out path, a port that cannot be "
                   "had, a worker that died"), _STOPPED),
    "inspect": (Exit(BAD, "a bad saved file or option"), _SKIPPED, Exit(DONE, "done")),
    "convert": (*_WRITE, Exit(DONE, "written")),
    "record": (Exit(BAD, "a bad option or --out path, a port that cannot be had"),
               Exit(DONE, "stopped by Ctrl-C (SIGINT) or SIGTERM (it drains, then prints "
                    "what it recorded)")),
    "index": (*_WRITE, Exit(DONE, "written")),
    "cache": (Exit(BAD, "a bad option"), Exit(DONE, "shown, or cleared")),
    "compare": (Exit(BAD, "bad input: a bad file, an option naming what is not there, "
                     "pairing across harnesses without --report"),
                Exit(DIFFER, "a paired verdict differs, or something could not be paired"),
                Exit(DONE, "every paired verdict agrees, nothing unpaired")),
    "run": (Exit(BAD, "the saved run could not be loaded, or a bad option or output path, "
                 "or --state holds another run or another `run` (COMMAND never ran)"),
            Exit(MISSED, "a request got no saved generation, or reached the server and got no "
                 "answer (even if COMMAND failed too), on any replica sharing --state; or "
                 "that state could not be read at the end"),
            Exit(UPSTREAM_FAILED, "a request forwarded to --upstream got no answer to save"),
            Exit(None, "when it failed (and every request it sent was answered); 128+N "
                 "when signal N (SIGINT, SIGTERM, SIGHUP) stopped run, and with it COMMAND"),
            Exit(NO_REQUESTS, "no request reached the server"),
            Exit(UNUSED, "saved samples were never asked for (unless --allow-unused)"),
            Exit(DONE, "every request answered, every saved sample asked for")),
}


def epilog(command: str) -> str:
    """The end of `command --help`: its exit statuses, one a line (click keeps a `\\b`
    paragraph as it is)."""
    lines = ["\b", "Exit status, the first that applies:"]
    for exit in EXITS[command]:
        lines += textwrap.wrap(exit.when, 74, initial_indent=f"  {exit.label:<2} ",
                               subsequent_indent="     ")
    return "\n".join(lines)


def markdown_table() -> str:
    """docs/errors.md's table of every command's exit statuses, from EXITS."""
    rows = ["| command | exit status, the first that applies | when |", "| --- | --- | --- |"]
    for command, exits in EXITS.items():
        rows += [f"| {f'`{command}`' if i == 0 else ''} | {e.label} | {e.when} |"
                 for i, e in enumerate(exits)]
    return "\n".join(rows)
