"""An outcome as a table for the terminal, or as data (`--json`).

The data holds everything: every row with its statistics, every flip (both instances,
both values, what answered the rescored request, both FILE:LINEs and the answers scored),
every one-sided verdict, every unpaired instance with its reason. The table shows the rows
and the first SHOWN of each list. Values in the data: a finite number as a number, NaN and
infinities as the strings "nan", "inf", "-inf", null as null, anything else as saved.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from . import stats
from .outcome import Flip, Outcome, Row
from .sides import Side
from .verdicts import Other, Value, shown

SHOWN = 50


def as_data(outcome: Outcome) -> dict[str, Any]:
    return {
        "original": _side(outcome.original),
        "rescored": _side(outcome.rescored),
        "paired_by": outcome.pairing.by,
        "pairs": len(outcome.pairing.pairs),
        "rows": [_row(row) for row in outcome.rows],
        "unpaired": [{"side": u.side, "task": u.verdict.task, "instance": u.verdict.instance,
                      "where": u.verdict.where, "reason": u.reason}
                     for u in outcome.unpaired],
        "left_out": [{"side": side, "metric": metric, "instances": n}
                     for side, metric, n in outcome.left_out],
        "other_texts": [{"task": p.original.task, "instance": p.original.instance,
                         "original": p.original.text, "rescored": p.rescored.text}
                        for p in outcome.other_texts],
        "status": outcome.status,
        "summary": summary(outcome),
    }


def _side(side: Side) -> dict[str, Any]:
    return {"path": side.path, "harnesses": sorted(side.harnesses),
            "instances": len(side.verdicts), "tasks": sorted(side.tasks)}


def _row(row: Row) -> dict[str, Any]:
    data: dict[str, Any] = {
        "task": row.task, "metric": row.metric, "rescored_metric": row.rescored_metric,
        "kind": row.kind, "paired": row.paired, "agree": row.agree,
        "flips": [flip_data(f) for f in row.flips],
        "one_sided": [{"side": o.side, "instance": o.verdict.instance,
                       "where": o.verdict.where_of(row.metric if o.side == "original"
                                                   else row.rescored_metric)}
                      for o in row.one_sided],
        "compared_as_numbers": len(row.numbers)}
    p = row.p_value()
    if p is not None:
        b, c = row.discordant
        data.update(p_value=p, discordant={"original_only": b, "rescored_only": c})
    difference = row.difference
    if difference is not None:
        data.update(mean_difference=difference.mean,
                    interval=[difference.low, difference.high],
                    bootstrap={"level": stats.LEVEL, "resamples": stats.RESAMPLES,
                               "seed": stats.SEED})
    return data


def flip_data(flip: Flip) -> dict[str, Any]:
    o, r = flip.pair.original, flip.pair.rescored
    mine, theirs = o.scores[flip.metric], r.scores[flip.rescored_metric]
    return {"instance": o.instance, "rescored_task": r.task, "rescored_instance": r.instance,
            "original": value_data(flip.original), "rescored": value_data(flip.rescored),
            "served": flip.pair.served, "original_where": o.where_of(flip.metric),
            "rescored_where": r.where_of(flip.rescored_metric),
            "original_answer": mine.answer, "rescored_answer": theirs.answer}


def value_data(value: Value) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Other):
        return orjson.loads(value.json)
    return value


def to_json(outcome: Outcome) -> str:
    return orjson.dumps(as_data(outcome), option=orjson.OPT_INDENT_2).decode()


def summary(outcome: Outcome) -> str:
    if outcome.status == 0:
        return (f"certified: all {sum(r.paired for r in outcome.rows)} paired verdicts agree, "
                "nothing unpaired")
    flips = sum(len(r.flips) for r in outcome.rows)
    one_sided = sum(len(r.one_sided) for r in outcome.rows)
    parts = [f"{flips} flipped verdict(s)" if flips else "",
             f"{one_sided} verdict(s) on one side only" if one_sided else "",
             f"{len(outcome.unpaired)} unpaired instance(s)" if outcome.unpaired else "",
             "no verdict paired" if not any(r.paired for r in outcome.rows) else ""]
    return "NOT certified: " + "; ".join(p for p in parts if p)


def table(outcome: Outcome) -> list[str]:
    o, r = outcome.original, outcome.rescored
    how = "the harness's instance ids" if outcome.pairing.by == "identity" else "the run report"
    lines = [f"original: {o.path} ({', '.join(sorted(o.harnesses))}, {len(o.verdicts)} "
             "instances)",
             f"rescored: {r.path} ({', '.join(sorted(r.harnesses))}, {len(r.verdicts)} "
             "instances)",
             f"paired by {how}: {len(outcome.pairing.pairs)} pairs", ""]
    lines += _columns([["task", "metric", "paired", "agree", "flips", "one-sided", "statistic"]]
                      + [cells(row) for row in outcome.rows])
    flips = [f for row in outcome.rows for f in row.flips]
    lines += _listed("flipped verdicts", [_flip_line(f) for f in flips])
    lines += _listed("verdicts on one side only", one_sided(outcome))
    lines += _listed("unpaired instances", unpaired(outcome))
    lines += _listed("metrics not compared (not named by --metric)", left_out(outcome))
    lines += _listed("pairs whose saved generations differ (not a verdict; harnesses may "
                     "post-process texts differently)", other_texts(outcome))
    return [*lines, "", summary(outcome)]


def one_sided(outcome: Outcome) -> list[str]:
    return [f"{row.task} {s.verdict.instance}, {row.metric}: only in {s.side} "
            f"({s.verdict.where})" for row in outcome.rows for s in row.one_sided]


def unpaired(outcome: Outcome) -> list[str]:
    return [f"{u.side} {u.verdict.task} {u.verdict.instance} ({u.verdict.where}): {u.reason}"
            for u in outcome.unpaired]


def left_out(outcome: Outcome) -> list[str]:
    return [f"{side} {metric} ({n} paired instances)" for side, metric, n in outcome.left_out]


def other_texts(outcome: Outcome) -> list[str]:
    return [f"{p.original.task} {p.original.instance}: {_clip(p.original.text)} vs "
            f"{_clip(p.rescored.text)}" for p in outcome.other_texts]


def _clip(text: str | None, size: int = 60) -> str:
    shown = repr(text)
    return shown if len(shown) <= size else shown[:size - 3] + "..."


def cells(row: Row) -> list[str]:
    metric = row.metric if row.metric == row.rescored_metric else \
        f"{row.metric} = {row.rescored_metric}"
    return [row.task, metric, str(row.paired), str(row.agree), str(len(row.flips)),
            str(len(row.one_sided)), statistic(row)]


def statistic(row: Row) -> str:
    p = row.p_value()
    if p is not None:
        b, c = row.discordant
        return f"McNemar p={p:.4g} ({b} 1->0, {c} 0->1)"
    difference = row.difference
    if difference is not None:
        return (f"mean diff {difference.mean:+.4g} [{difference.low:+.4g}, "
                f"{difference.high:+.4g}]")
    return "-"


def _flip_line(flip: Flip) -> str:
    o, r = flip.pair.original, flip.pair.rescored
    other = "" if (o.task, o.instance) == (r.task, r.instance) else \
        f" (rescored {r.task} {r.instance})"
    source = f"served {flip.pair.served}; " if flip.pair.served else ""
    return (f"{o.task} {o.instance}{other}, {flip.metric}: {shown(flip.original)} -> "
            f"{shown(flip.rescored)}; {source}original {o.where_of(flip.metric)}; rescored "
            f"{r.where_of(flip.rescored_metric)}")


def _listed(title: str, items: list[str]) -> list[str]:
    if not items:
        return []
    more = [f"  ... and {len(items) - SHOWN} more (--json and --html list them all)"] \
        if len(items) > SHOWN else []
    return ["", f"{title} ({len(items)}):", *(f"  {i}" for i in items[:SHOWN]), *more]


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    numeric = {2, 3, 4, 5}
    return ["  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                      for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
            for r in rows]
