"""The lm-eval reader's perplexity rows (`loglikelihood_rolling`): every document of the
load's samples files is cut into the windows lm-eval sends for it, and the window values
are chosen for all of them at once (saved/rolling.py), since one window may be sent for
several documents and the server answers a request with one value.

Each window is a record of the loglikelihood request lm-eval sends for it (`prompt` = its
ids, `echo`, `logprobs: 1`, `max_tokens: 1`, and its decoded text as a second form, when
no other window decodes to the same text), answered with a choice that lm-eval's parser
reads back as the window's value (`tokens.loglikelihood_choice`, greedy: lm-eval drops the
flag). A document that cannot be made exact is skipped with its reason, and its windows
of its own (all its windows, when it has none) answer with `replay_unusable`: a
rescoring that sends them fails, never sums a guess.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ...errors import LoadError, where_of
from ...paths import COMPLETION_PATH
from .. import rolling, tokens
from ..record import Record, make_record
from .base import LoadContext
from .lm_eval_run import HARNESS, Run, loglikelihood_request, loglikelihood_response

SKIPPED = "loglikelihood_rolling document whose saved sum cannot be served exactly"


@dataclass(frozen=True)
class Doc:
    """One document's windows, as lm-eval sends them, and its saved sum."""

    base: tuple[tuple[str, Any], ...]  # the request's fields but the prompt (model, seed)
    windows: list[tuple[list[int], int]]
    saved: float
    instance: str
    file: str
    line: int


@dataclass
class RollingDocs:
    """The perplexity documents of every samples file of the load (whatever its group),
    made into records once all are read (`LoadContext.deferred`)."""

    docs: list[Doc] = field(default_factory=list)

    def add(self, args: dict[str, Any], answers: Any, run: Run, tokenizer: Any,
            instance: str, file: str, line: int, field_name: str) -> None:
        """Read one rolling request (`arg_0` the text; `answers` = `[saved sum]`)."""
        saved = answers[0] if isinstance(answers, list) and len(answers) == 1 else None
        try:
            value = float(saved) if isinstance(saved, (str, int, float)) else None
        except ValueError:
            value = None
        if value is None or not isinstance(args.get("arg_0"), str):
            raise LoadError(file, line, f"expected [\"<logprob>\"] for the text in arg_0, got "
                            f"{saved!r}", field=field_name)
        try:
            cut = rolling.windows(tokenizer, args["arg_0"], add_bos_token=run.add_bos_token,
                                  max_length=run.max_length,
                                  custom_prefix_token_id=run.custom_prefix_token_id)
        except ValueError as e:
            raise LoadError(file, line, f"cannot tokenize this request: {e}",
                            field=field_name) from None
        base = (("model", run.model), ("seed", run.seed))
        self.docs.append(Doc(base, cut, value, instance, file, line))

    def records(self, ctx: LoadContext) -> Iterator[Record]:
        """Every window's record, each run's (model, seed) assigned on its own."""
        runs: dict[tuple[tuple[str, Any], ...], list[Doc]] = {}
        for doc in self.docs:
            runs.setdefault(doc.base, []).append(doc)
        for base, docs in runs.items():
            yield from _run_records(dict(base), docs, ctx)


def _run_records(base: dict[str, Any], docs: list[Doc], ctx: LoadContext) -> Iterator[Record]:
    keys = [[tuple(ids) for ids, _ in doc.windows] for doc in docs]
    done = rolling.assign(keys, [doc.saved for doc in docs])
    for i, reason in sorted(done.failed.items()):
        ctx.skip(f"{SKIPPED}: {reason}", where_of(docs[i].file, docs[i].line))
    first: dict[tuple[int, ...], tuple[Doc, int, int]] = {}  # window -> its first doc, ctxlen
    for doc, doc_keys in zip(docs, keys, strict=True):
        for j, (key, (_, ctxlen)) in enumerate(zip(doc_keys, doc.windows, strict=True)):
            seen = first.setdefault(key, (doc, j, ctxlen))
            first[key] = (seen[0], seen[1], max(seen[2], ctxlen))
    texts: dict[str, int] = {}
    for key in first:
        text = tokens.decode_like_lm_eval(ctx.tokenizer, key)
        texts[text] = texts.get(text, 0) + 1
    for key, (doc, j, ctxlen) in first.items():
        yield _window(base, list(key), ctxlen, done.values.get(key), texts, doc, j, ctx)


def _window(base: dict[str, Any], ids: list[int], ctxlen: int, value: float | None,
            texts: dict[str, int], doc: Doc, j: int, ctx: LoadContext) -> Record:
    """One window's record: its value (`ctxlen` the largest of the documents that send it,
    so that every one of them reads it), or an error where a document sending it failed."""
    model = base["model"]
    request = loglikelihood_request(model, base["seed"], ids)
    meta = {"harness": HARNESS, "instance": f"{doc.instance}:window{j}"}
    if value is None:
        return make_record(COMPLETION_PATH, model, request, None, meta, doc.file, doc.line,
                           unusable=f"a document sending this window: {SKIPPED}")
    choice = tokens.loglikelihood_choice(ids, ctxlen, value, True, tokenizer=ctx.tokenizer)
    where = f"{where_of(doc.file.rsplit('/', 1)[-1], doc.line)}:window{j}"
    text = tokens.decode_like_lm_eval(ctx.tokenizer, ids)
    also = [{**request, "prompt": text}] if texts[text] == 1 else None
    return make_record(COMPLETION_PATH, model, request,
                       loglikelihood_response(model, where, choice), meta, doc.file, doc.line,
                       also=also)
