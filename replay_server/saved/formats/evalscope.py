"""Reader for evalscope work directories (`evalscope eval --eval-type openai_api`).

    W/configs/task_config.yaml                      eval_type, repeats, generation_config
    W/predictions/<model>/<dataset>_<subset>.jsonl   one line per sample and repeat
        {"index", "model", "model_output": {"id", "model", "choices": [{"message",
         "stop_reason", "logprobs"}], "usage": {"input_tokens", "output_tokens", ...},
         "metadata", "error"}, "messages": [<the prompt>..., <the answer>], "agent_trace"}

Lines are in completion order. `messages` is the sample's input followed by the answer
(`model_output.choices[0].message`); every message carries extra fields (`id`, `source`,
`metadata`, `internal`, ...) that were never sent. The request is rebuilt the way
evalscope's OpenAI client builds it (`models/utils/openai.py`): the prompt messages as
`{role, content}`, `model` from the line, and the sampling fields of `generation_config`
(`openai_completion_params`: `stop_seqs` as `stop`, `extra_body` merged, `stream` and
`timeout` not in the body). Repeats are the same request sent k times (no `n`): index
`i` is repeat `i % k` of doc `i // k`, so a doc is one instance whose k records are
served in repeat order.

The answer is rebuilt from `model_output` (evalscope keeps the parsed response, not the
body): the response `id` and `model` as sent; `content` (a null content was saved as
`""`); reasoning, saved as a content part, served as `reasoning` (the wire field name is
not saved); a refusal as `refusal`; `finish_reason` from inspect-style `stop_reason`
(`max_tokens` -> `length`; a reason evalscope did not know is kept in metadata and served
as it was); `usage` from `input_tokens`/`output_tokens`/`total_tokens` (plus cached and
reasoning token details when saved); `logprobs` as saved; `created` null (not saved).

Not served: an answer evalscope made itself when a request failed (no response id: it
turns some 400 errors, context length and content filter, into an answer holding the error
message) or whose `model_output.error` is set, both unusable; lines of agent runs, answers
with tool calls (the tools offered are not saved), prompts with non-text parts, tool
messages or tool calls, and runs of another `eval_type` or with a `response_schema`,
each skipped with a count. A request that offers tools (a key field) never matches a
record of this reader: it fails as a miss, never gets an answer saved for another prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...errors import LoadError, where_of
from ...paths import CHAT_PATH
from ..record import Record, make_record
from .base import (
    LoadContext,
    dig,
    fingerprint,
    head_keys,
    json_lines,
    read_rows,
    read_side_file,
    saved_answer,
    text_response,
    usage,
)

HARNESS = "evalscope"
PREDICTION_KEYS = {"index", "model", "model_output", "messages"}
# evalscope's openai_completion_params: generation_config field -> body field. `stream`,
# `timeout`, `batch_size`, `retries` and the other settings never reach the body;
# `parallel_tool_calls` only with tools (whose lines are skipped).
SAMPLING = (("max_tokens", "max_tokens"), ("frequency_penalty", "frequency_penalty"),
            ("stop_seqs", "stop"), ("presence_penalty", "presence_penalty"),
            ("repetition_penalty", "repetition_penalty"), ("logit_bias", "logit_bias"),
            ("seed", "seed"), ("temperature", "temperature"), ("top_p", "top_p"),
            ("top_k", "top_k"), ("n", "n"), ("logprobs", "logprobs"),
            ("top_logprobs", "top_logprobs"), ("reasoning_effort", "reasoning_effort"))
# inspect-style stop_reason -> the finish_reason the server sent (as_stop_reason reversed)
FINISH = {"stop": "stop", "max_tokens": "length", "tool_calls": "tool_calls",
          "content_filter": "content_filter", "model_length": "model_length"}
AGENT = "agent run (evalscope saves only the last model call of an agent's trajectory)"
TOOL_CALLS = "answer with tool calls (the tools offered are not saved in predictions)"
DUPLICATE = "line repeats an index already read (a rerun appended to the predictions file)"


@dataclass(frozen=True)
class Config:
    """What configs/task_config.yaml says about how requests were built."""

    sampling: dict[str, Any] = field(default_factory=dict)
    repeats: int = 1
    refused: str | None = None  # why no request of this run can be rebuilt


class EvalscopeReader:
    """evalscope work directories of `openai_api` runs: predictions and the task config."""

    name = "evalscope"
    expects = ('evalscope work directories: predictions/MODEL/*.jsonl, lines with "index", '
               '"model", "model_output" and "messages"')

    def detect(self, path: Path, head: bytes) -> bool:
        if path.name == "task_config.yaml":
            return path.parent.name == "configs" and (path.parent.parent / "predictions").is_dir()
        return (path.suffix == ".jsonl" and path.parent.parent.name == "predictions"
                and PREDICTION_KEYS <= head_keys(head))

    def read(self, files: list[Path], ctx: LoadContext) -> Iterator[Record]:
        configs: dict[Path, Config | None] = {}
        for path in files:
            if path.suffix != ".jsonl":
                continue  # the config: read for the predictions beside it
            work = path.parent.parent.parent
            if work not in configs:
                configs[work] = _config(work / "configs" / "task_config.yaml", path, ctx)
            config = configs[work]
            if config is not None:
                yield from _Predictions(path, config, ctx).records()


def _config(path: Path, predictions: Path, ctx: LoadContext) -> Config | None:
    data = read_side_file(path, ctx, missing=LoadError(
        str(predictions), None,
        f"no {path} beside predictions/: evalscope writes its generation_config and repeats "
        "there"))
    if data is None:
        return None
    try:
        config = yaml.safe_load(data)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        ctx.bad(LoadError(str(path), mark.line + 1 if mark else None, f"not valid YAML: {e}"))
        return None
    gen = dig(config, "generation_config")
    gen = gen if isinstance(gen, dict) else {}
    repeats = dig(config, "repeats")
    return Config(_sampling(gen), repeats if isinstance(repeats, int) and repeats > 0 else 1,
                  _refused(config, gen))


def _sampling(gen: dict[str, Any]) -> dict[str, Any]:
    body = {sent: gen[saved] for saved, sent in SAMPLING if gen.get(saved) is not None}
    if isinstance(body.get("logit_bias"), dict):  # token ids are JSON object keys on the wire
        body["logit_bias"] = {str(k): v for k, v in body["logit_bias"].items()}
    extra = gen.get("extra_body")
    return {**body, **extra} if isinstance(extra, dict) else body


def _refused(config: Any, gen: dict[str, Any]) -> str | None:
    eval_type = dig(config, "eval_type")
    if eval_type != "openai_api":
        return (f"evalscope eval_type {eval_type!r} (only openai_api runs are read: their "
                "requests are the ones rebuilt)")
    if gen.get("response_schema") is not None:
        return "generation_config.response_schema set (the response_format sent is not rebuilt)"
    return None


class _Predictions:
    """One predictions file: its lines grouped by doc, each group in repeat order."""

    def __init__(self, path: Path, config: Config, ctx: LoadContext) -> None:
        self.path, self.file, self.config, self.ctx = path, str(path), config, ctx
        self.seen: dict[int, tuple[int, bytes]] = {}
        self.groups: dict[int, tuple[int, dict[str, Any]]] = {}

    def records(self) -> Iterator[Record]:
        read = sorted(read_rows(json_lines(self.path, self.ctx), self._line, self.ctx),
                      key=lambda item: item[0])
        for _, record in read:
            yield record

    def fail(self, line: int, name: str, reason: str) -> LoadError:
        return LoadError(self.file, line, reason, field=name)

    def _line(self, numbered: tuple[int, Any]) -> tuple[int, Record] | None:
        """(index, record) of one predictions line; None for a line left out (counted)."""
        line, obj = numbered
        if not isinstance(obj, dict):
            raise LoadError(self.file, line, "expected a JSON object")
        index, model, messages = obj.get("index"), obj.get("model"), obj.get("messages")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise self.fail(line, "index", "expected a non-negative integer")
        if not isinstance(model, str) or not model:
            raise self.fail(line, "model", "expected the model name")
        if (not isinstance(messages, list) or len(messages) < 2
                or not all(isinstance(m, dict) for m in messages)
                or messages[-1].get("role") != "assistant"):
            raise self.fail(line, "messages", "expected the prompt messages then the answer "
                            "(an assistant message)")
        where = where_of(self.file, line)
        reason = self.config.refused or (AGENT if obj.get("agent_trace") is not None else None)
        built = None if reason else _wire_messages(messages[:-1])
        if isinstance(built, str):
            reason = built
        if reason is not None:
            self.ctx.skip(reason, where)
            return None
        assert built is not None
        request = {"model": model, "messages": built, **self.config.sampling}
        self._same_group(line, index, request)
        response, unusable, skip = self._response(line, obj.get("model_output"), messages[-1])
        if skip is not None:
            self.ctx.skip(skip, where)
            return None
        if self._duplicate(line, index, request, response, unusable):
            return None
        group = index // self.config.repeats
        source = {"harness": HARNESS, "instance": f"{self.path.stem}:{group}", "index": index}
        return index, make_record(CHAT_PATH, model, request, response, source, self.file, line,
                                  unusable=unusable)

    def _duplicate(self, line: int, index: int, request: dict[str, Any],
                   response: dict[str, Any] | None, unusable: str | None) -> bool:
        """Whether this index was read already with the same request and answer (a rerun
        appended to the file: read once; message ids, timings and the response id of a
        rerun differ and do not count), else an error if the answer differs."""
        digest = fingerprint([request, *saved_answer(response, unusable)])
        first = self.seen.setdefault(index, (line, digest))
        if first[0] == line:
            return False
        if first[1] != digest:
            raise self.fail(line, "index", f"index {index} is already at line {first[0]} "
                            "with another prompt or answer: two runs appended to one "
                            "predictions file? keep one run's lines")
        self.ctx.skip(DUPLICATE, where_of(self.file, line))
        return True

    def _same_group(self, line: int, index: int, request: dict[str, Any]) -> None:
        """The repeats of one doc are one request: a group whose prompts differ means the
        lines are not grouped the way this reader assumes."""
        group = index // self.config.repeats
        first = self.groups.setdefault(group, (line, request))
        if first[1] != request:
            k = self.config.repeats
            raise self.fail(line, "messages", f"index {index} is repeat {index % k} of doc "
                            f"{group} (repeats {k}), whose repeat at line {first[0]} has "
                            "another prompt")

    def _response(self, line: int, output: Any, last: dict[str, Any]
                  ) -> tuple[dict[str, Any] | None, str | None, str | None]:
        """(response body, why it is unusable, why the line is skipped)."""
        if output is None:
            return None, "evalscope saved no model_output", None
        if not isinstance(output, dict):
            raise self.fail(line, "model_output", "expected an object or null")
        choices = output.get("choices")
        if not isinstance(choices, list) or not choices or not all(
                isinstance(c, dict) and isinstance(c.get("message"), dict) for c in choices):
            raise self.fail(line, "model_output.choices", "expected a list of choices, each "
                            "with a message")
        answer = choices[0]["message"]
        if (answer.get("id"), answer.get("content")) != (last.get("id"), last.get("content")):
            raise self.fail(line, "messages", "the last message is not model_output's answer: "
                            "the prompt of this answer is not known")
        if any(c["message"].get("tool_calls") for c in choices):
            return None, None, TOOL_CALLS
        if output.get("error"):
            return None, f"evalscope saved an error: {str(output['error'])[:300]}", None
        if output.get("id") is None:
            return None, ("no response id: evalscope made this answer itself (it turns some "
                          "request errors, such as a context-length error, into an answer "
                          "holding the error message); the server sent none"), None
        parts = [_message(c["message"]) for c in choices]
        broken = next((p for p in parts if isinstance(p, str)), None)
        if broken is not None:
            return None, broken, None
        taken = [p for p in parts if not isinstance(p, str)]
        finish = dig(output, "metadata", "finish_reasons")
        finish = finish if isinstance(finish, dict) else {}
        return text_response(
            CHAT_PATH, [p[0] for p in taken],
            [FINISH.get(str(c.get("stop_reason"))) or _str(finish.get(str(i)))
             for i, c in enumerate(choices)],
            _usage(output.get("usage")), id=str(output["id"]),
            model=output.get("model") if isinstance(output.get("model"), str) else None,
            reasonings=[p[1] for p in taken], refusals=[p[2] for p in taken],
            logprobs=[c.get("logprobs") for c in choices]), None, None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | str:
    """The prompt as evalscope's openai_chat_messages sends it, or why it is not rebuilt:
    text only (a user message's text parts as parts), no tool calls or tool messages."""
    wire = []
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role == "user" and isinstance(content, list) and content and all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                for p in content):
            content = [{"type": "text", "text": p["text"]} for p in content]
        elif (role not in ("system", "user", "assistant") or not isinstance(content, str)
              or message.get("tool_calls") or message.get("internal") is not None):
            return (f"prompt with a message evalscope sends in a form not rebuilt here (message "
                    f"{i}, {role}: content parts, tool calls or a tool message)")
        wire.append({"role": role, "content": content})
    return wire


def _message(message: dict[str, Any]) -> tuple[str | None, str | None, str | None] | str:
    """(content, reasoning, refusal) of a saved answer, or why it cannot be taken apart.
    evalscope saves a plain string, or [reasoning part, text part] when the server sent
    reasoning, or [text part marked refusal]."""
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return content, None, None
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        return "the saved answer's content is neither text nor content parts"
    texts = [p for p in content if p.get("type") == "text"]
    thoughts = [p for p in content if p.get("type") == "reasoning"]
    if (len(texts) != 1 or len(thoughts) > 1 or len(texts) + len(thoughts) != len(content)
            or any(p.get("redacted") for p in thoughts)
            or not isinstance(texts[0].get("text"), str)):
        return "the saved answer holds content parts that are not one text and its reasoning"
    reasoning = _str(thoughts[0].get("reasoning")) if thoughts else None
    text = texts[0]["text"]
    return (None, reasoning, text) if texts[0].get("refusal") else (text, reasoning, None)


def _usage(saved: Any) -> dict[str, Any] | None:
    """The OpenAI usage evalscope's ModelUsage was made from (`model_output_from_openai`)."""
    if not isinstance(saved, dict):
        return None
    out: dict[str, Any] | None = usage(saved.get("input_tokens"), saved.get("output_tokens"))
    if out is None:
        return None
    total = saved.get("total_tokens")
    if isinstance(total, int) and not isinstance(total, bool):
        out["total_tokens"] = total
    cached, reasoning = saved.get("input_tokens_cache_read"), saved.get("reasoning_tokens")
    if isinstance(cached, int) and not isinstance(cached, bool):
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    if isinstance(reasoning, int) and not isinstance(reasoning, bool):
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out
