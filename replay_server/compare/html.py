"""An outcome as one self-contained HTML page (`--html FILE`): no script, no font, no
image, nothing fetched; it opens from a mail attachment or a CI artifact as it is.

The page: the verdict, the table of rows, a per-task agreement chart (inline SVG: agreeing,
flipped and one-sided verdicts of each row as parts of one bar), each flip with both
sides' generation, answer, value and FILE:LINE side by side, the one-sided verdicts and the
unpaired instances. Every text from the saved files is escaped.
"""

from __future__ import annotations

from html import escape

from . import render
from .outcome import Flip, Outcome, Row
from .verdicts import shown

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:80em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;
text-align:left;vertical-align:top}th{background:#f3f3f3}td.n{text-align:right}
.ok{color:#176c2e}.bad{color:#a4161a}pre{white-space:pre-wrap;margin:0;font-size:13px}
.flip{border:1px solid #ccc;margin:1em 0;padding:.5em}.flip table{width:100%;margin:.5em 0 0}
.flip td{width:50%}code{font-size:12px;color:#555}svg text{font-size:12px}
"""
BAR, BAR_HEIGHT, LABEL = 480, 18, 320


def page(outcome: Outcome) -> str:
    o, r = outcome.original, outcome.rescored
    verdict = render.summary(outcome)
    good = "ok" if outcome.status == 0 else "bad"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>replay-server compare</title>", f"<style>{STYLE}</style></head><body>",
        "<h1>replay-server compare</h1>",
        f"<p>original <code>{escape(o.path)}</code> ({escape(', '.join(sorted(o.harnesses)))},"
        f" {len(o.verdicts)} instances)<br>rescored <code>{escape(r.path)}</code> "
        f"({escape(', '.join(sorted(r.harnesses)))}, {len(r.verdicts)} instances)<br>"
        f"paired by {escape(outcome.pairing.by)}: {len(outcome.pairing.pairs)} pairs</p>",
        f'<p class="{good}"><strong>{escape(verdict)}</strong></p>',
        _table(outcome.rows), _chart(outcome.rows), _flips(outcome.rows),
        _listed("Verdicts on one side only", render.one_sided(outcome)),
        _listed("Unpaired instances", render.unpaired(outcome)),
        _listed("Metrics not compared (not named by --metric)", render.left_out(outcome)),
        _listed("Pairs whose saved generations differ (not a verdict)",
                render.other_texts(outcome)),
        "</body></html>"]
    return "\n".join(parts) + "\n"


def _table(rows: list[Row]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("task", "metric", "paired", "agree", "flips",
                                             "one-sided", "statistic"))
    body = []
    for row in rows:
        cells = render.cells(row)
        body.append("<tr>" + "".join(
            f'<td class="n">{escape(c)}</td>' if 2 <= i <= 5 else f"<td>{escape(c)}</td>"
            for i, c in enumerate(cells)) + "</tr>")
    return f"<h2>Per task and metric</h2><table><tr>{head}</tr>{''.join(body)}</table>"


def _chart(rows: list[Row]) -> str:
    """One bar per row: agreeing (green), flipped (red), one-sided (grey) verdicts."""
    height = BAR_HEIGHT * max(len(rows), 1) + 10
    shapes = []
    for i, row in enumerate(rows):
        y = 5 + i * BAR_HEIGHT
        total = row.paired + len(row.one_sided)
        label = escape(f"{row.task} / {row.metric}")
        shapes.append(f'<text x="0" y="{y + 13}">{label}</text>')
        x = float(LABEL)
        for count, colour, what in ((row.agree, "#2e9d4f", "agree"),
                                    (len(row.flips), "#d62828", "flipped"),
                                    (len(row.one_sided), "#999999", "one-sided")):
            if count and total:
                width = BAR * count / total
                shapes.append(f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" '
                              f'height="{BAR_HEIGHT - 4}" fill="{colour}">'
                              f"<title>{count} {what}</title></rect>")
                x += width
        share = f"{row.agree}/{total} agree" if total else "nothing compared"
        shapes.append(f'<text x="{LABEL + BAR + 8}" y="{y + 13}">{escape(share)}</text>')
    return (f'<h2>Agreement per task</h2><svg width="{LABEL + BAR + 140}" height="{height}" '
            f'role="img" aria-label="agreement per task and metric">{"".join(shapes)}</svg>')


def _flips(rows: list[Row]) -> str:
    flips = [f for row in rows for f in row.flips]
    if not flips:
        return "<h2>Flipped verdicts</h2><p>None.</p>"
    return f"<h2>Flipped verdicts ({len(flips)})</h2>" + "".join(map(_flip, flips))


def _flip(flip: Flip) -> str:
    o, r = flip.pair.original, flip.pair.rescored
    mine, theirs = o.scores[flip.metric], r.scores[flip.rescored_metric]
    served = (f"<br>served from <code>{escape(flip.pair.served)}</code>"
              if flip.pair.served else "")

    def side(title: str, task: str, instance: str, metric: str, value: str, where: str,
             answer: str | None, text: str | None) -> str:
        return (f"<td><strong>{title}</strong> {escape(task)} {escape(instance)}<br>"
                f"{escape(metric)} = <strong>{escape(value)}</strong><br>"
                f"<code>{escape(where)}</code><br>answer: <pre>{escape(answer or '')}</pre>"
                f"generation: <pre>{escape(text or '')}</pre></td>")

    return ('<div class="flip">'
            f"<strong>{escape(o.task)} {escape(o.instance)}</strong>, {escape(flip.metric)}: "
            f"{escape(shown(flip.original))} &rarr; {escape(shown(flip.rescored))}{served}"
            "<table><tr>"
            + side("original", o.task, o.instance, flip.metric, shown(flip.original),
                   o.where_of(flip.metric), mine.answer, o.text)
            + side("rescored", r.task, r.instance, flip.rescored_metric, shown(flip.rescored),
                   r.where_of(flip.rescored_metric), theirs.answer, r.text)
            + "</tr></table></div>")


def _listed(title: str, items: list[str]) -> str:
    if not items:
        return ""
    return (f"<h2>{escape(title)} ({len(items)})</h2><ul>"
            + "".join(f"<li>{escape(i)}</li>" for i in items) + "</ul>")
