"""How an lm-eval run built its requests: the settings its results file keeps
(`results_<date>.json` beside the samples file: `config.model`, `config.model_args`, the
tokenizer's eos), lm-eval's defaults otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ...errors import LoadError
from .base import LoadContext, synthetic_id

HARNESS = "lm-eval"


@dataclass(frozen=True)
class Run:
    """How the run built its requests, from its results file (lm-eval's defaults otherwise)."""

    model: str
    source: str = ""
    seed: int = 1234
    max_gen_toks: int = 256
    eos: str | None = None
    add_bos_token: bool = False
    max_length: int = 2048
    custom_prefix_token_id: int | None = None


def loglikelihood_request(model: str, seed: int, ids: list[int]) -> dict[str, Any]:
    """The body lm-eval's local-completions sends for a loglikelihood input (its ids, as
    `tokens.loglikelihood_input` cuts them): the ids echoed back with their logprobs."""
    return {"model": model, "prompt": ids, "temperature": 0, "max_tokens": 1, "logprobs": 1,
            "seed": seed, "echo": True}


def loglikelihood_response(model: str, where: str, choice: dict[str, Any]) -> dict[str, Any]:
    """The completions response that carries one loglikelihood choice
    (`tokens.loglikelihood_choice`), as lm-eval's parser reads it."""
    return {"id": synthetic_id(HARNESS, where), "object": "text_completion", "created": None,
            "model": model, "choices": [choice], "usage": None}


def flag(value: Any) -> bool:
    """A boolean model_arg as saved: a bool, or `True`/`False` from a k=v string."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def run_of(path: Path, date: str, ctx: LoadContext) -> Run:
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
    args = model_args(config.get("model_args"))
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
            add_bos_token=flag(args.get("add_bos_token")),
            max_length=int(args.get("max_length") or 2048),
            custom_prefix_token_id=(None if args.get("custom_prefix_token_id") in (None, "")
                                    else int(args["custom_prefix_token_id"])),
        )
    except (TypeError, ValueError) as e:
        ctx.bad(LoadError(str(results), None, f"model_args: {e}", field="config.model_args"))
        return Run(model=path.parent.name)


def model_args(value: Any) -> dict[str, Any]:
    """`model_args` as saved: a dict, or lm-eval's `k=v,k=v` string, each value as lm-eval
    reads it (`utils.handle_arg_string`) where that changes what the run sent."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        pairs = (part.split("=", 1) for part in value.split(",") if "=" in part)
        return {k.strip(): _arg(v) for k, v in pairs}
    return {}


def _arg(value: str) -> str | None:
    """A `k=v` value: the string inside matching quotes, None for `None`, else stripped
    (the numbers and booleans are read where they are used)."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return None if value.lower() == "none" else value
