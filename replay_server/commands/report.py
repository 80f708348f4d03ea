"""What `replay-server run` reports when COMMAND ends, for a human and for `compare`.

The report's lines (`report`): what was answered from the saved run, what got no saved
generation and why (distinct requests, grouped by where they first differ from the nearest
saved prompt, with how many attempts each), requests that got no answer at all, tokenizer
calls, requests forwarded upstream, and which saved generations were never asked for; and
`run --report`'s file (`write_report`), one JSON line per distinct request, which
compare/report.py reads back. The report only says what happened: the verdict, and the exit
status, are run.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from ..errors import REPLAY_CODES, IndexDamaged
from ..replay.replayer import Replayer
from ..replay.stats import FORWARD_FAILURES, Failure
from ..saved.writer import written_whole

SHOWN = 20


def report(replayer: Replayer, stopped: bool = False, gone: dict[int, int] | None = None
           ) -> list[str]:
    """What happened, for a human: answers, failures with reasons, unused samples;
    `stopped`: run stopped COMMAND (a miss, --max-attempts, a signal); `gone`: requests
    in flight on each replica of a shared state that died."""
    stats = replayer.stats
    resets = f", {stats.resets} reset(s)" if stats.resets else ""
    sent = sum(sum(c.values()) for c in stats.forwarded.values())
    upstream = f", {sent} forwarded upstream" if sent else ""
    # (uploads, creates, cancels, deletions: no generation of their own; their lines are
    # requests, counted among the others)
    calls = f", {stats.calls} batch call(s)" if stats.calls else ""
    lines = ["replay report:", f"  requests: {stats.with_outcome()} ({stats.answered} "
             f"answered from the saved run, {stats.failed()} got no saved generation"
             f"{upstream}{calls}{resets})"]
    lines += tokenizer_lines(replayer)
    lines += unanswered_lines(replayer, stopped, gone or {})
    for name, outcome in stats.per_model().items():
        errors = ", ".join(f"{k}={outcome[k]}" for k in REPLAY_CODES if outcome[k])
        lines.append(f"  model {name}: {outcome['hits']} prompts answered; "
                     f"errors: {errors or 'none'}; saved samples never asked for: "
                     f"{outcome['unused_samples']}")
        if outcome["unused_samples"]:
            try:
                examples = stats.unused_examples(name)
            except IndexDamaged as e:  # (the index file: the verdict fails on them anyway)
                lines.append(f"    where they are cannot be listed: {e}")
            else:
                lines.append("    e.g. " + "; ".join(
                    f"{where}: {unused} of {saved}" for where, (unused, saved)
                    in examples.items()))
    lines += forwarded_lines(replayer)
    if stats.rejected:
        lines.append("  other error answers: " + ", ".join(
            f"{code} x{n}" for code, n in sorted(stats.rejected.items())))
    failures = sorted(stats.failures.values(), key=lambda f: f.first["time"])
    if failures:
        lines.append(f"  {len(failures)} distinct request(s) got no saved generation, in "
                     f"{stats.failed()} attempt(s), by where they first differ:")
        lines += grouped(failures)
        lines.append("  each of them, in the order they came:" if len(failures) <= SHOWN
                     else f"  the first {SHOWN} of them:")
    for failure in failures[:SHOWN]:
        miss = failure.first
        tries = f" ({failure.attempts} attempts)" if failure.attempts > 1 else ""
        lines.append(f"  - [{miss['code']}] {miss['endpoint']} model={miss['model']}{tries}: "
                     f"{miss['message']}")
        if miss.get("difference_quoted"):
            lines.append(f"      first difference: {miss['difference_quoted']}")
    if len(failures) > SHOWN:
        lines.append(f"  ... and {len(failures) - SHOWN} more (GET /replay/misses while "
                     "serving lists the latest)")
    return lines


def unanswered_lines(replayer: Replayer, stopped: bool, gone: dict[int, int]) -> list[str]:
    """The requests that reached the server and got no answer: cut off in flight, or
    answered but never delivered (no saved sample was used for them); and those in
    flight on a replica that died (said apart: they fail the run only through the
    samples they leave unused)."""
    stats = replayer.stats
    lines = [f"  {n} request(s) in flight on replica {replica} when it died (its heartbeat "
             "stopped): a resend gets the same answer, or a sample it took from a repeats "
             "cursor is given back when its prompt is asked again, failing the run, or "
             "stays unused" for replica, n in sorted(gone.items())]
    cut, undelivered = stats.in_flight() - sum(gone.values()), stats.undelivered
    if not cut + undelivered:
        return lines
    kinds = ([f"{cut} cut off in flight (begun, never received whole: its client left or "
              "stopped sending)"] if cut else []) + (
        [f"{undelivered} answered but never delivered (its client left first, or "
         f"{stats.died} of them its replica died with the answer on its way; the saved "
         "samples it carried were given back, and a resend may have had a later one)"]
        if undelivered else [])
    why = ("run stopped COMMAND (see below): they do not fail it again" if stopped
           else "each fails the run")
    return [*lines, f"  {cut + undelivered} more request(s) reached the server and got no "
            f"answer: {', '.join(kinds)}; {why}"]


def forwarded_lines(replayer: Replayer) -> list[str]:
    """The requests that went upstream (--upstream), per model, apart from the replayed
    ones; those whose failed attempts a later saved one recovered; then each distinct one
    still failing."""
    stats = replayer.stats
    lines = []
    for name, counts in sorted(stats.forwarded.items()):
        outcomes = ", ".join(f"{k}={counts[k]}" for k in FORWARD_FAILURES if counts[k])
        stopped = f"; cut off when run stopped COMMAND: {counts['stopped']}" \
            if counts["stopped"] else ""
        lines.append(f"  model {name} (forwarded upstream, not replayed): {counts['saved']} "
                     f"exchanges answered and saved; failed attempts: {outcomes or 'none'}"
                     f"{stopped}")
    if stats.forward_recovered:
        retried = sum(f.attempts for f in stats.forward_recovered.values())
        lines.append(f"  {len(stats.forward_recovered)} distinct forwarded request(s) failed "
                     "upstream, then a later attempt was answered and saved "
                     f"({retried} failed attempt(s)): not a failure")
    failures = sorted(stats.forward_failures.values(), key=lambda f: f.first["time"])
    if failures:
        lines.append(f"  {len(failures)} distinct forwarded request(s) failed upstream, in "
                     f"{stats.forward_failed()} attempt(s), no later one saved:")
    for failure in failures[:SHOWN]:
        miss = failure.first
        tries = f" ({failure.attempts} attempts)" if failure.attempts > 1 else ""
        lines.append(f"  - [{miss['code']}] {miss['endpoint']} model={miss['model']}{tries}: "
                     f"{miss['message']}")
    return lines


def tokenizer_lines(replayer: Replayer) -> list[str]:
    """The tokenizer calls (vLLM's /tokenize, ...): how they were answered, and, loudly,
    those that were not (they carry no generation: `run` fails on them only --strict)."""
    counts = replayer.stats.tokenizer
    if not counts:
        return []
    lines = [f"  tokenizer calls: {counts['recorded']} answered from recordings, "
             f"{counts['computed']} computed with --tokenizer, {counts['unanswered']} "
             "unanswered"]
    unanswered = counts["unanswered"]
    if unanswered:
        fails = "fails the run on them" if replayer.rules.strict else "would fail the run"
        lines.append(f"  WARNING: {unanswered} tokenizer call(s) went unanswered: token "
                     "counts the harness derives from them may differ; no saved "
                     f"generation was affected (--strict {fails})")
        for (endpoint, why), failure in sorted(replayer.stats.tokenizer_unanswered.items(),
                                               key=lambda f: -f[1].attempts)[:SHOWN]:
            lines.append(f"    {failure.attempts} x {endpoint}: {why}")
    return lines


def group_of(miss: dict[str, Any]) -> str:
    """What a failure shares with others of one systematic cause: for a miss, the place
    and kind of its first difference from the nearest saved prompt; else its code."""
    if miss["code"] == "replay_no_match":
        return miss.get("difference_group") or "no saved prompt for this endpoint"
    return f"[{miss['code']}]"


def grouped(failures: list[Failure]) -> list[str]:
    """The failures counted by group, largest first, each with one example."""
    groups: dict[str, list[Failure]] = {}
    for failure in failures:
        groups.setdefault(group_of(failure.first), []).append(failure)
    lines = []
    for group, members in sorted(groups.items(), key=lambda g: -len(g[1]))[:SHOWN]:
        example = members[0].first
        near = f" (e.g. nearest {example['nearest']})" if example.get("nearest") else ""
        lines.append(f"    {len(members)}: {group}{near}")
    if len(groups) > SHOWN:
        lines.append(f"    ... and {len(groups) - SHOWN} more groups")
    return lines


def write_report(path: Path, replayer: Replayer) -> int:
    """The per-request report (`run --report`), one JSON line per distinct request."""
    lines = replayer.stats.report_lines()
    with written_whole(path) as tmp, tmp.open("wb") as f:
        for line in lines:
            f.write(orjson.dumps(line) + b"\n")
    return len(lines)
