"""`inspect`: what a saved run would serve, without serving it.

Loads exactly as `serve` does and reports, per source file and model, what was loaded,
skipped and ignored, the prompts that would answer `replay_ambiguous` or
`replay_unusable`, and how many samples each prompt saved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import shown_file
from ..index.index import Entry, entry_of
from ..index.loading import Loaded, load


def _where(entry: Entry) -> str:
    return entry.instances[0].where if entry.instances else entry.unusable[0].where


def summary(loaded: Loaded) -> dict[str, Any]:
    models: dict[str, Any] = {}
    for name, run in sorted(loaded.index.models.items()):
        entries = [entry_of(e) for e in run.entries.values()]
        ambiguous = [e for e in entries if len(e.instances) > 1 and not e.uniform]
        unusable = [e for e in entries if not e.instances]
        sizes: Counter[int] = Counter(i.size for e in entries for i in e.instances)
        models[name] = {
            "records": run.records,
            "prompts": len(run.entries),
            "samples": run.samples,
            "unusable_records": run.unusable_records,
            "samples_per_instance": {str(k): v for k, v in sorted(sizes.items())},
            "ambiguous_prompts": len(ambiguous),
            "ambiguous_examples": [_where(e) for e in ambiguous[:3]],
            "unusable_prompts": len(unusable),
            "unusable_examples": [e.unusable[0].unusable for e in unusable[:3]],
            "tokenizer_answers": sum(1 for v in run.tokenizer.values() if v is not None),
            "tokenizer_conflicts": sum(1 for v in run.tokenizer.values() if v is None),
            "max_model_len": run.max_model_len,
        }
    return {
        "objects": loaded.plan.notes,
        "files": [{"file": shown_file(str(path)), "format": name}
                  for name, path in loaded.plan.files],
        "records_by_source": [{"file": f, "model": m, "records": n}
                              for (f, m), n in sorted(loaded.per_file.items())],
        "models": models,
        "skipped": {reason: {"count": n, "examples": loaded.ctx.skipped_examples[reason]}
                    for reason, n in sorted(loaded.ctx.skipped.items())},
        "bad_lines": [str(e) for e in loaded.ctx.bad_lines],
        "ignored_files": [shown_file(str(p)) for p in loaded.plan.ignored],
        "seconds": round(loaded.seconds, 3),
    }


def render(report: dict[str, Any]) -> list[str]:
    """The summary in lines for a human."""
    lines = [*report["objects"], "files:"]
    lines += [f"  {f['file']}  ({f['format']})" for f in report["files"]]
    lines.append("records by source file and model:")
    lines += [f"  {r['file']}  {r['model']}: {r['records']}" for r in report["records_by_source"]]
    for name, m in report["models"].items():
        per = ", ".join(f"{v} with {k}" for k, v in m["samples_per_instance"].items())
        lines.append(f"model {name}: {m['records']} records, {m['prompts']} prompts, "
                     f"{m['samples']} samples, {m['unusable_records']} unusable records")
        lines.append(f"  samples per instance: {per or 'none'}")
        if m["tokenizer_answers"] or m["tokenizer_conflicts"]:
            conflicts = m["tokenizer_conflicts"]
            lines.append(f"  recorded tokenizer answers: {m['tokenizer_answers']}"
                         + (f", {conflicts} request(s) recorded with different answers "
                            "(unanswered)" if conflicts else "")
                         + f"; max_model_len: {m['max_model_len'] or 'unknown'}")
        if m["ambiguous_prompts"]:
            lines.append(f"  ambiguous prompts (replay_ambiguous): {m['ambiguous_prompts']}, "
                         f"e.g. {'; '.join(m['ambiguous_examples'])}")
        if m["unusable_prompts"]:
            lines.append(f"  prompts with no usable answer (replay_unusable): "
                         f"{m['unusable_prompts']}, e.g. {'; '.join(m['unusable_examples'])}")
    for reason, s in report["skipped"].items():
        lines.append(f"skipped {s['count']} row(s): {reason} (e.g. {', '.join(s['examples'])})")
    lines += [f"bad line: {e}" for e in report["bad_lines"]]
    if report["ignored_files"]:
        lines.append(f"ignored {len(report['ignored_files'])} file(s) in no known format: "
                     + ", ".join(report["ignored_files"][:5]))
    return lines


def inspect_paths(paths: Sequence[str | Path], *, skip_bad_lines: bool, max_line: int,
                  tokenizer: str | None) -> dict[str, Any]:
    """The report of `inspect PATHS`: load as `serve` would, then summarise."""
    return summary(load(paths, skip_bad_lines=skip_bad_lines, max_line=max_line,
                        tokenizer=tokenizer))
