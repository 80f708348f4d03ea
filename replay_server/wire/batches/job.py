"""What both batch protocols say of a batch: its lines' outcomes (`Outcome`), the batch as
it ended (`Job`), and one page of a list of them (`page`), newest first, as both APIs list.

A batch is run whole when it is created (a replay has no queue), so a `Job` is only ever
ended: the stages its API reports (validating, in progress, finalizing) all happened at
`created`, and the object says so with the timestamps the API gives for each stage.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

DAY = 24 * 3600  # both APIs: a batch expires 24 hours after it was created
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One line's answer: status 200 and the saved reply's body, byte for byte; or an
    error's status and its envelope in the line's API's shape (never an invented body)."""

    custom_id: str
    status: int
    body: bytes
    request_id: str

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass(slots=True)
class Job:
    """A batch, ended: `outcomes` in input order, or, for an input the API refuses whole
    (OpenAI's `failed` batch), `problems` (`{code, message, line, param}`) and no outcome.
    `endpoint` is the path each line was sent to; `input_file_id`, `metadata` and
    `completion_window` are OpenAI's, as the batch was created with them; the output and
    error files are named once made (OpenAI's)."""

    id: str
    created: int
    endpoint: str
    outcomes: list[Outcome]
    problems: list[dict[str, Any]] = field(default_factory=list)
    input_file_id: str | None = None
    metadata: dict[str, Any] | None = None
    completion_window: str = "24h"
    output_file_id: str | None = None
    error_file_id: str | None = None

    def counted(self) -> tuple[int, int]:
        """(lines answered from the saved run, lines errored)."""
        ok = sum(1 for o in self.outcomes if o.ok)
        return ok, len(self.outcomes) - ok


def rfc3339(when: int) -> str:
    """Anthropic's timestamps: `2024-08-20T18:37:24Z`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def page(items: Sequence[T], ids: Sequence[str], limit: int, after: str | None = None,
         before: str | None = None) -> tuple[list[T], bool]:
    """One page of `items` (newest first, `ids` theirs): the `limit` after the id `after`
    (older ones), or the `limit` just before the id `before` (newer ones); and whether
    more lie beyond the page in that direction. An id the list lacks starts nowhere: an
    empty page."""
    if after is not None:
        start = ids.index(after) + 1 if after in ids else len(ids)
        return list(items[start:start + limit]), start + limit < len(items)
    if before is not None:
        end = ids.index(before) if before in ids else 0
        return list(items[max(0, end - limit):end]), end - limit > 0
    return list(items[:limit]), limit < len(items)
