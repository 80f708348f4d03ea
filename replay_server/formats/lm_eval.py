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
- Completions: `arg_0` is the prompt string. A `tokenized_requests=True` run sent token ids,
  which cannot be rebuilt without the tokenizer: its records serve the string prompt that a
  `tokenized_requests=False` rescoring sends.
- `repeats: k` sends k identical n=1 requests: k one-choice records sharing one instance,
  in `resps` order, so n=1 calls get them one by one.
- Rows repeat once per filter: each doc is read once (the repeats must agree).
- Loglikelihood rows (and any request that is not generate_until) are skipped with a count:
  lm-eval saves only their summed logprob, not the token logprobs a replay needs.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import LoadError
from ..records import CHAT_PATH, COMPLETION_PATH, Record, make_record
from .base import LoadContext, json_lines, synthetic_id, text_response

HARNESS = "lm-eval"
PLACEHOLDER = "LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER"
_DATE = r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(?:\.\d+)?"
SAMPLES = re.compile(rf"^samples_(?P<task>.+)_(?P<date>{_DATE})\.jsonl$")
RESULTS = re.compile(rf"^(?P<stem>.+)_(?P<date>{_DATE})\.json$")
# lm-eval's OpenAIChatCompletion payload differs from the local-chat-completions one.
OPENAI_CHAT = frozenset({"openai-chat-completions", "azure-openai-chat-completions"})
SKIP_DUPLICATE = "row repeats a doc already read (one row per filter)"


@dataclass(frozen=True)
class Run:
    """How the run built its requests, from its results file (lm-eval's defaults otherwise)."""

    model: str
    source: str = ""
    seed: int = 1234
    max_gen_toks: int = 256
    eos: str | None = None


class LmEvalReader:
    name = "lm-eval"

    def detect(self, path: Path, head: bytes) -> bool:
        if SAMPLES.match(path.name):
            return head.lstrip().startswith(b'{"doc_id"')  # lm-eval writes doc_id first
        match = RESULTS.match(path.name)
        return match is not None and any(path.parent.glob(f"samples_*_{match['date']}.jsonl"))

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        for path in files:
            match = SAMPLES.match(path.name)
            if match:
                run = _run(path, match["date"], ctx)
                yield from _read_samples(path, match["task"], run, ctx)


def _run(path: Path, date: str, ctx: LoadContext) -> Run:
    """The run's settings from the results file next to the samples file."""
    candidates = [path.parent / f"results_{date}.json",
                  *sorted(path.parent.glob(f"*_{date}.json"))]
    results = next((p for p in candidates if p.is_file()), None)
    if results is None:
        return Run(model=path.parent.name)
    try:
        data = orjson.loads(results.read_bytes())
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
    except ValueError as e:
        ctx.bad(LoadError(str(results), None, f"not a valid results file: {e}"))
        return Run(model=path.parent.name)
    config: dict[str, Any] = data["config"] if isinstance(data.get("config"), dict) else {}
    args = _model_args(config.get("model_args"))
    eos = data.get("tokenizer_eos_token")
    eos = args.get("eos_string") or (eos[0] if isinstance(eos, list) and eos else None)
    try:
        return Run(
            model=str(args.get("model") or args.get("pretrained") or data.get("model_name")
                      or path.parent.name),
            source=str(config.get("model") or ""),
            seed=int(args.get("seed", 1234)),
            max_gen_toks=int(args.get("max_gen_toks", 256)),
            eos=eos if isinstance(eos, str) else None,
        )
    except (TypeError, ValueError) as e:
        ctx.bad(LoadError(str(results), None, f"model_args: {e}", field="config.model_args"))
        return Run(model=path.parent.name)


def _model_args(value: Any) -> dict[str, Any]:
    """`model_args` as saved: a dict, or lm-eval's `k=v,k=v` string."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        pairs = (part.split("=", 1) for part in value.split(",") if "=" in part)
        return {k.strip(): v.strip() for k, v in pairs}
    return {}


def _read_samples(path: Path, task: str, run: Run, ctx: LoadContext) -> Iterator[Record]:
    file = str(path)
    seen: dict[Any, tuple[int, bytes]] = {}
    for line, row in json_lines(path, ctx):
        try:
            arguments, resps = _row(row, file, line)
            digest = hashlib.blake2b(orjson.dumps([arguments, resps]), digest_size=16).digest()
            first = seen.setdefault(row["doc_id"], (line, digest))
            if first != (line, digest):
                if first[1] != digest:
                    raise LoadError(file, line, f"doc_id {row['doc_id']} was read at line "
                                    f"{first[0]} with other arguments or resps", field="resps")
                ctx.skip(SKIP_DUPLICATE, f"{file}:{line}")
                continue
            yield from _records(arguments, resps, f"{task}:{row['doc_id']}", run, ctx,
                                file, line)  # a list: a bad row yields nothing
        except LoadError as error:
            ctx.bad(error)


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


def _kind(args: dict[str, Any]) -> str | None:
    """Why a request is not replayed, or None for a generate_until request we can rebuild."""
    arg_1 = args.get("arg_1")
    if isinstance(arg_1, dict):
        if len(args) > 2:
            return "multimodal generate_until request (its images are not saved)"
        return None
    if "arg_1" in args:
        return ("loglikelihood request (lm-eval saves only the summed logprob, not the token "
                "logprobs a replay needs)")
    return "loglikelihood_rolling request (lm-eval saves only the summed logprob)"


def _records(requests: list[dict[str, Any]], resps: list[Any], doc: str, run: Run,
             ctx: LoadContext, file: str, line: int) -> list[Record]:
    records: list[Record] = []
    skipped: set[str] = set()
    for i, (args, texts) in enumerate(zip(requests, resps, strict=True)):
        reason = _kind(args)
        if reason is not None:
            skipped.add(reason)
            continue
        field = f"arguments.gen_args_{i}"
        endpoint, body = _request(args, run, file, line, field)
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise LoadError(file, line, "expected a list of strings (one per repeat)",
                            field=f"resps[{i}]")
        instance = doc if i == 0 else f"{doc}:{i}"
        records += [_record(endpoint, body, text, run.model, file, line, instance,
                            f"{Path(file).name}:{line}:{i}:{j}") for j, text in enumerate(texts)]
    for reason in sorted(skipped):
        ctx.skip(reason, f"{file}:{line}")
    return records


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
            line: int, instance: str, where: str) -> Record:
    unusable = None
    response: dict[str, Any] | None = None
    if _is_placeholder(text):
        unusable = (f"lm-eval saved its null-answer placeholder ({text!r}): the server sent "
                    "no content")
    else:
        response = text_response(endpoint, [text], id=synthetic_id(HARNESS, where), model=model)
    return make_record(endpoint, model, request, response,
                       {"harness": HARNESS, "instance": instance}, file, line, unusable=unusable)


def _is_placeholder(text: str) -> bool:
    configured = os.environ.get(PLACEHOLDER)
    return text == PLACEHOLDER or bool(configured) and text == configured
