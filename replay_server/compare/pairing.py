"""Which original instance each rescored instance is: exactly, or not at all.

- By identity, when both sides come from one harness: the harness's own (task, instance
  id); a witness that differs (lm-eval's `doc_hash`, a `native_id`) means the two are
  different items, and neither is paired.
- Through the report, across harnesses: a rescored instance's requests (keyed as the
  server keyed them) -> the report's line for each -> the one saved instance that holds
  that prompt -> the original instance whose saved exchanges it is. Every step must give
  exactly one answer, and one original instance must be claimed by exactly one rescored
  instance. Anything else is unpaired with its reason: a request the report lacks or that
  missed, a prompt several saved instances share, a saved instance with several scored
  instances (epochs), requests answered from different instances, several rescored
  instances answered from one (repeats, epochs), a source that is not in ORIGINAL.
Nothing is guessed and nothing is dropped: every instance of both sides ends up in a pair
or in `unpaired`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .report import Line, Report, Source
from .requests import Asked, Requests
from .sides import Side
from .verdicts import Verdict, order


@dataclass(frozen=True, slots=True)
class Pair:
    original: Verdict
    rescored: Verdict
    served: str | None = None  # what answered the rescored request: FILE:LINE (instance)


@dataclass(frozen=True, slots=True)
class Unpaired:
    side: str  # "original" or "rescored"
    verdict: Verdict
    reason: str


@dataclass
class Pairing:
    by: str  # "identity" or "report"
    pairs: list[Pair] = field(default_factory=list)
    unpaired: list[Unpaired] = field(default_factory=list)


class SavedIndex:
    """Verdicts (or report lines) by the saved instance they stand for."""

    def __init__(self) -> None:
        self.by_instance: dict[tuple[str | None, str | None], list[Verdict]] = {}
        self.by_line: dict[tuple[str | None, int | None], list[Verdict]] = {}

    @classmethod
    def of(cls, side: Side) -> SavedIndex:
        index = cls()
        for verdict in side.verdicts.values():
            saved = verdict.saved
            if saved is None:
                continue
            if saved.instance is not None:
                index.by_instance.setdefault((saved.file, saved.instance), []).append(verdict)
            else:
                index.by_line.setdefault((saved.file, saved.line), []).append(verdict)
        return index

    def named_by(self, source: Source) -> list[Verdict]:
        return (self.by_instance.get((source.file, source.instance), [])
                + self.by_line.get((source.file, source.line), []))


def by_identity(original: Side, rescored: Side, report: Report | None = None) -> Pairing:
    result = Pairing("identity")
    served = _served(original, report) if report is not None else {}
    for key in sorted(original.verdicts.keys() | rescored.verdicts.keys(), key=order):
        o, r = original.verdicts.get(key), rescored.verdicts.get(key)
        if o is None:
            assert r is not None
            result.unpaired.append(Unpaired("rescored", r, f"{original.label} has no "
                                            f"{key[0]} instance {key[1]}"))
        elif r is None:
            result.unpaired.append(Unpaired("original", o, f"{rescored.label} has no "
                                            f"{key[0]} instance {key[1]}"))
        elif (why := _different_items(o, r)) is not None:
            result.unpaired += [Unpaired("original", o, why), Unpaired("rescored", r, why)]
        else:
            result.pairs.append(Pair(o, r, served.get(key)))
    return result


def _different_items(o: Verdict, r: Verdict) -> str | None:
    if o.witness is None or r.witness is None or o.witness[0] != r.witness[0] \
            or o.witness == r.witness:
        return None
    return (f"not the same item on both sides: {o.witness[0]} {o.witness[1]!r} vs "
            f"{r.witness[1]!r}")


def _served(original: Side, report: Report) -> dict[tuple[str, str], str]:
    """Original instance -> what answered its prompt, from the report's hit lines that
    name one saved instance."""
    index = SavedIndex.of(original)
    found: dict[tuple[str, str], str] = {}
    for lines in report.lines.values():
        for line in lines:
            if line.status == "hit" and len(line.sources) == 1:
                for verdict in index.named_by(line.sources[0]):
                    found.setdefault(verdict.key, line.served[0] if line.served
                                     else str(line.sources[0]))
    return found


def by_report(original: Side, rescored: Side, report: Report, requests: Requests) -> Pairing:
    result = Pairing("report")
    index = SavedIndex.of(original)
    claims: dict[tuple[str, str], list[tuple[Verdict, str]]] = {}
    for key in sorted(rescored.verdicts, key=order):
        r = rescored.verdicts[key]
        found = _answered_from(requests.of(r), report, index, original.label)
        if isinstance(found, str):
            result.unpaired.append(Unpaired("rescored", r, found))
        else:
            claims.setdefault(found[0].key, []).append((r, found[1]))
    for key in sorted(original.verdicts, key=order):
        o = original.verdicts[key]
        claimants = claims.get(key, [])
        if not claimants:
            result.unpaired.append(Unpaired("original", o, "no rescored instance was answered "
                                            "from its saved generation"))
        elif len(claimants) > 1:
            names = ", ".join(f"{r.task} {r.instance}" for r, _ in claimants[:3])
            shared = (f"{len(claimants)} rescored instances were answered from its one saved "
                      f"instance ({names}): repeats or epochs cannot be paired one to one")
            result.unpaired.append(Unpaired("original", o, shared))
            result.unpaired += [Unpaired("rescored", r, shared) for r, _ in claimants]
        elif (why := _different_items(o, claimants[0][0])) is not None:
            result.unpaired += [Unpaired("original", o, why),
                                Unpaired("rescored", claimants[0][0], why)]
        else:
            result.pairs.append(Pair(o, *claimants[0]))
    return result


def _answered_from(asked: list[Asked], report: Report, index: SavedIndex,
                   label: str) -> tuple[Verdict, str] | str:
    """The original instance whose saved exchanges answered every request of a rescored
    instance (and what answered, FILE:LINE), or why there is not exactly one."""
    if not asked:
        return ("no saved request of it was found (a model call the harness did not log, "
                "or one answered from a cache)")
    found: dict[tuple[str, str], tuple[Verdict, str]] = {}
    for one in asked:
        if one.request is None:
            return one.why_not or "its request cannot be keyed"
        lines = [line for form in one.request for line in report.get(*form)]
        answer = _one_source(lines, index, label)
        if isinstance(answer, str):
            return answer
        found.setdefault(answer[0].key, answer)
    if len(found) > 1:
        return ("its requests were answered from different saved instances: "
                + ", ".join(f"{v.task} {v.instance}" for v, _ in found.values()))
    return next(iter(found.values()))


def _one_source(lines: list[Line], index: SavedIndex, label: str) -> tuple[Verdict, str] | str:
    if not lines:
        return ("its request is not in the report (it did not reach the server under this "
                "`run --report`, or the report is of another run)")
    if len(lines) > 1:
        return f"the report has {len(lines)} lines for its request (one per model asked)"
    line = lines[0]
    if line.status == "forwarded":
        return "its request went to the upstream (--upstream), not to the saved run"
    if line.status != "hit":
        return f"its request got no saved generation ({line.code or 'a miss'})"
    if len(line.sources) != 1:
        shown = ", ".join(map(str, line.sources[:3]))
        return (f"{len(line.sources)} saved instances share its prompt ({shown}): which "
                "one it stands for cannot be told")
    source = line.sources[0]
    targets = index.named_by(source)
    if not targets:
        return f"it was answered from {source}, which is not in {label}"
    if len(targets) > 1:
        return (f"it was answered from {source}, which is {len(targets)} scored instances "
                f"in {label} (epochs or repeats): which one cannot be told")
    return targets[0], line.served[0] if line.served else str(source)
