"""Reader for lm-evaluation-harness `--log_samples` output.

    <output_path>/<model_sanitized>/samples_<task>_<date>.jsonl   one line per (doc, filter)
    <output_path>/<model_sanitized>/results_<date>.json           the run's config

A samples row holds the doc's requests (`arguments.gen_args_N = {arg_0, arg_1}`) and their
raw answers (`resps[N]`, one string per repeat), but neither the HTTP body nor any
`finish_reason`, usage or response id. So this reader rebuilds the body the way lm-eval's
API models build it (`models/openai_completions.py`), from `arg_1` (the generation kwargs)
and the results file (`model_args`: model, seed, max_gen_toks, eos_string; the tokenizer's
eos), and serves each saved text with `finish_reason` and `usage` null.

- Chat (`local-chat-completions --apply_chat_template`): `arg_0` is `[json string of the
  messages]` (lm-eval's JsonChatStr), sent as `messages` exactly.
- Completions: `arg_0` is the prompt string, which a `tokenized_requests=False` rescoring
  sends. A `tokenized_requests=True` run (local-completions' default) sent token ids: with
  the run's tokenizer (`--tokenizer`), each record is keyed by those ids too
  (`tokens.encode_like_lm_eval`: special tokens with `add_bos_token`, the cut to
  `max_length - 1 - max_gen_toks`), so either form of the request gets the saved answer.
- `repeats: k` sends k identical n=1 requests: k one-choice records sharing one instance,
  in `resps` order, so n=1 calls get them one by one.
- Rows repeat once per filter: each doc is read once (the repeats must agree).
- Loglikelihood rows (`arg_1` a continuation string: multiple-choice tasks) need the
  tokenizer: with it, each (context, continuation) becomes the request lm-eval sends
  (`prompt` = the ids of `tokens.encode_pair`, cut like lm-eval, `echo`, `logprobs: 1`,
  `max_tokens: 1`), answered with a choice whose token logprobs lm-eval's parser sums to
  exactly the saved logprob and whose greedy flag is the saved one
  (`tokens.loglikelihood_choice`); the decoded text is a second form of the request
  (`tokenized_requests=False`). Without a tokenizer they are skipped with a count.
- Perplexity rows (`loglikelihood_rolling`: `arg_0` the text alone, `resps` = `[[sum]]`)
  need the tokenizer too: with it, each document becomes the windows lm-eval sends for it
  (the `max_length` of `model_args`), one window carrying the saved sum and the others 0,
  assigned across every samples file of the load (whatever its group) so that a window
  two documents share answers both (`lm_eval_rolling.py`, `saved/rolling.py`); a document
  that cannot be made exact is skipped with its reason and its own windows refuse. Without
  a tokenizer they are skipped with a count, as are multimodal requests.
- A null answer was saved as lm-eval's placeholder: the text
  `LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER`, or that environment variable's value when it is
  set and not empty, is unusable. Its default is "", which is indistinguishable from an
  empty answer and is served as one.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import orjson

from ...errors import LoadError, where_of
from ...paths import CHAT_PATH, COMPLETION_PATH
from .. import tokens
from ..record import Record, make_record
from .base import LoadContext, json_lines, read_rows, synthetic_id, text_response
from .lm_eval_rolling import RollingDocs
from .lm_eval_run import HARNESS, Run, loglikelihood_request, loglikelihood_response, run_of

PLACEHOLDER = "LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER"
_DATE = r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(?:\.\d+)?"
SAMPLES = re.compile(rf"^samples_(?P<task>.+)_(?P<date>{_DATE})\.jsonl$")
RESULTS = re.compile(rf"^(?P<stem>.+)_(?P<date>{_DATE})\.json$")
# lm-eval's OpenAIChatCompletion payload differs from the local-chat-completions one.
OPENAI_CHAT = frozenset({"openai-chat-completions", "azure-openai-chat-completions"})
SKIP_DUPLICATE = "row repeats a doc already read (one row per filter)"


class LmEvalReader:
    """lm-evaluation-harness samples files, with the results file beside them."""

    name = "lm-eval"
    expects = ('lm-evaluation-harness --log_samples output: samples_TASK_DATE.jsonl, lines '
               'starting {"doc_id"')

    def detect(self, path: Path, head: bytes) -> bool:
        if SAMPLES.match(path.name):
            return head.lstrip().startswith(b'{"doc_id"')  # lm-eval writes doc_id first
        match = RESULTS.match(path.name)
        return match is not None and any(path.parent.glob(f"samples_*_{match['date']}.jsonl"))

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        # assigned across every file of the load, whatever its group: they may share windows
        rolling = ctx.deferred.setdefault(self.name, RollingDocs())
        assert isinstance(rolling, RollingDocs)
        for path in files:
            match = SAMPLES.match(path.name)
            if match:
                run = run_of(path, match["date"], ctx)
                yield from _read_samples(path, match["task"], run, ctx, rolling)


def _read_samples(path: Path, task: str, run: Run, ctx: LoadContext,
                  rolling: RollingDocs) -> Iterator[Record]:
    file = str(path)
    seen: dict[Any, tuple[int, bytes]] = {}

    def doc(numbered: tuple[int, Any]) -> list[Record] | None:
        """The records of one samples row; None for a row that repeats a doc read already."""
        line, row = numbered
        arguments, resps = _row(row, file, line)
        digest = hashlib.blake2b(orjson.dumps([arguments, resps]), digest_size=16).digest()
        first = seen.setdefault(row["doc_id"], (line, digest))
        if first != (line, digest):
            if first[1] != digest:
                raise LoadError(file, line, f"doc_id {row['doc_id']} was read at line "
                                f"{first[0]} with other arguments or resps", field="resps")
            ctx.skip(SKIP_DUPLICATE, where_of(file, line))
            return None
        return _records(arguments, resps, f"{task}:{row['doc_id']}", run, ctx, file, line,
                        rolling)

    return chain.from_iterable(read_rows(json_lines(path, ctx), doc, ctx))


def _row(row: Any, file: str, line: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """The row's requests (gen_args_0, gen_args_1, ...) and their resps, checked."""
    if not isinstance(row, dict):
        raise LoadError(file, line, "expected a JSON object")
    if not isinstance(row.get("doc_id"), int):
        raise LoadError(file, line, "expected an integer", field="doc_id")
    arguments, resps = row.get("arguments"), row.get("resps")
    if not isinstance(arguments, dict) or not arguments or not all(
            isinstance(a, dict) for a in arguments.values()):
        raise LoadError(file, line, "expected an object of gen_args_N objects (one or more)",
                        field="arguments")
    requests = [arguments.get(f"gen_args_{i}") for i in range(len(arguments))]
    if any(r is None for r in requests):
        raise LoadError(file, line, "expected keys gen_args_0 .. gen_args_N",
                        field="arguments")
    if not isinstance(resps, list) or len(resps) != len(requests):
        raise LoadError(file, line, f"expected a list of {len(requests)} lists (one per "
                        "request)", field="resps")
    return [r for r in requests if r is not None], resps


LOGLIKELIHOOD = "loglikelihood"
ROLLING = "loglikelihood_rolling"
NO_TOKENIZER = ("loglikelihood request (its token logprobs are rebuilt from the saved sum with "
                "the run's tokenizer: give --tokenizer)")
NO_TOKENIZER_ROLLING = ("loglikelihood_rolling request (its windows are rebuilt from the saved "
                        "sum with the run's tokenizer: give --tokenizer)")


def _kind(args: dict[str, Any], tokenizer: Any) -> str | None:
    """LOGLIKELIHOOD, ROLLING, None for a generate_until request, or why a request is not
    replayed."""
    arg_1 = args.get("arg_1")
    if isinstance(arg_1, dict):
        if len(args) > 2:
            return "multimodal generate_until request (its images are not saved)"
        return None
    if isinstance(arg_1, str) and isinstance(args.get("arg_0"), str):
        return LOGLIKELIHOOD if tokenizer is not None else NO_TOKENIZER
    if "arg_1" in args or not isinstance(args.get("arg_0"), str):
        return "loglikelihood request of an unknown shape"
    return ROLLING if tokenizer is not None else NO_TOKENIZER_ROLLING


def _records(requests: list[dict[str, Any]], resps: list[Any], doc: str, run: Run,
             ctx: LoadContext, file: str, line: int, rolling: RollingDocs) -> list[Record]:
    records: list[Record] = []
    skipped: set[str] = set()
    for i, (args, answers) in enumerate(zip(requests, resps, strict=True)):
        reason = _kind(args, ctx.tokenizer)
        instance = doc if i == 0 else f"{doc}:{i}"
        where = f"{where_of(Path(file).name, line)}:{i}"  # (a seed of response ids)
        if reason == LOGLIKELIHOOD:
            records.append(_loglikelihood(args, answers, run, ctx.tokenizer, file, line,
                                          instance, where, f"resps[{i}]"))
            continue
        if reason == ROLLING:  # made into records once every document is read
            rolling.add(args, answers, run, ctx.tokenizer, instance, file, line, f"resps[{i}]")
            continue
        if reason is not None:
            skipped.add(reason)
            continue
        field = f"arguments.gen_args_{i}"
        endpoint, body = _request(args, run, file, line, field)
        if not isinstance(answers, list) or not all(isinstance(t, str) for t in answers):
            raise LoadError(file, line, "expected a list of strings (one per repeat)",
                            field=f"resps[{i}]")
        also = None
        if endpoint == COMPLETION_PATH and ctx.tokenizer is not None:
            also = [{**body, "prompt": _generation_ids(args, run, ctx.tokenizer)}]
        records += [_record(endpoint, body, text, run.model, file, line, instance,
                            f"{where}:{j}", also) for j, text in enumerate(answers)]
    for reason in sorted(skipped):
        ctx.skip(reason, where_of(file, line))
    return records


def _generation_ids(args: dict[str, Any], run: Run, tokenizer: Any) -> list[int]:
    """The token ids lm-eval's local-completions sends for a generate_until context."""
    max_gen_toks = args["arg_1"].get("max_gen_toks", run.max_gen_toks)
    return tokens.encode_like_lm_eval(tokenizer, args["arg_0"], add_bos_token=run.add_bos_token,
                                      max_length=run.max_length, max_gen_toks=int(max_gen_toks))


def _loglikelihood(args: dict[str, Any], answers: Any, run: Run, tokenizer: Any, file: str,
                   line: int, instance: str, where: str, field: str) -> Record:
    """The loglikelihood request lm-eval sends for (context, continuation), answered with
    the saved logprob and greedy flag, shaped for lm-eval's own parser."""
    saved = answers[0] if isinstance(answers, list) and len(answers) == 1 else None
    try:
        logprob, greedy = tokens.saved_loglikelihood(saved)
    except ValueError as e:
        raise LoadError(file, line, str(e), field=field) from None
    try:
        context, continuation = tokens.encode_pair(
            tokenizer, args["arg_0"], args["arg_1"], add_bos_token=run.add_bos_token,
            custom_prefix_token_id=run.custom_prefix_token_id)
        ids, ctxlen = tokens.loglikelihood_input(context, continuation,
                                                 max_length=run.max_length)
    except ValueError as e:
        raise LoadError(file, line, f"cannot tokenize this request: {e}", field=field) from None
    request = loglikelihood_request(run.model, run.seed, ids)
    meta = {"harness": HARNESS, "instance": instance}
    try:
        choice = tokens.loglikelihood_choice(ids, ctxlen, logprob, greedy, tokenizer=tokenizer)
    except ValueError as e:  # NotRepresentable: a saved value no response can carry
        return make_record(COMPLETION_PATH, run.model, request, None, meta, file, line,
                           unusable=f"the saved loglikelihood cannot be replayed: {e}")
    also = [{**request, "prompt": tokens.decode_like_lm_eval(tokenizer, ids)}]
    return make_record(COMPLETION_PATH, run.model, request,
                       loglikelihood_response(run.model, where, choice), meta, file, line,
                       also=also)


def _request(args: dict[str, Any], run: Run, file: str, line: int,
             field: str) -> tuple[str, dict[str, Any]]:
    """The endpoint and the body lm-eval sends for one generate_until request."""
    prompt = args.get("arg_0")
    if isinstance(prompt, str):
        return COMPLETION_PATH, {"prompt": prompt, "model": run.model,
                                 **_sampling(args["arg_1"], run, False, file, line, field)}
    messages = None
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        try:
            messages = orjson.loads(prompt[0])
        except orjson.JSONDecodeError:
            messages = None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise LoadError(file, line, "expected a prompt string or a one-element list holding "
                        "the JSON of the chat messages", field=f"{field}.arg_0")
    return CHAT_PATH, {"messages": messages, "model": run.model,
                       **_sampling(args["arg_1"], run, True, file, line, field)}


def _sampling(gen_kwargs: dict[str, Any], run: Run, chat: bool, file: str, line: int,
              field: str) -> dict[str, Any]:
    """lm-eval's `_create_payload` for generation, minus the prompt and the model."""
    kwargs = dict(gen_kwargs)
    kwargs.pop("do_sample", None)
    if "max_tokens" in kwargs:
        max_tokens = kwargs.pop("max_tokens")
    else:
        max_tokens = kwargs.pop("max_gen_toks", run.max_gen_toks)
    temperature = kwargs.pop("temperature", 0)
    openai = chat and run.source in OPENAI_CHAT
    until = kwargs.pop("until", ["<|endoftext|>"] if openai else None)
    if isinstance(until, str):
        until = [until]
    elif until is None:
        until = []
    elif not isinstance(until, list):
        raise LoadError(file, line, "expected a string or a list of strings",
                        field=f"{field}.arg_1.until")
    stop = until + [run.eos] if run.eos is not None and run.eos not in until else until
    body = {"max_completion_tokens" if openai else "max_tokens": max_tokens,
            "temperature": temperature, "stop": stop[:4] if chat else stop, "seed": run.seed,
            **kwargs}
    if openai and any(tag in run.model for tag in ("o1", "5", "o3", "o4")):
        body.pop("stop")
        body["temperature"] = 1
    return body


def _record(endpoint: str, request: dict[str, Any], text: str, model: str, file: str,
            line: int, instance: str, where: str,
            also: list[dict[str, Any]] | None = None) -> Record:
    unusable = None
    response: dict[str, Any] | None = None
    if _is_placeholder(text):
        unusable = (f"lm-eval saved its null-answer placeholder ({text!r}): the server sent "
                    "no content")
    else:
        response = text_response(endpoint, [text], id=synthetic_id(HARNESS, where), model=model)
    return make_record(endpoint, model, request, response,
                       {"harness": HARNESS, "instance": instance}, file, line, unusable=unusable,
                       also=also)


def _is_placeholder(text: str) -> bool:
    configured = os.environ.get(PLACEHOLDER)
    return text == PLACEHOLDER or bool(configured) and text == configured
