"""The fake model's behaviour: tokens, answers, logprobs, sampling state, limits.

Pure functions plus the small per-prompt counter state; no HTTP here. See server.py's
docstring for the behaviour in prose.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections import defaultdict
from typing import Any

DEFAULT_MODEL = "tiny-model"
SYSTEM_FINGERPRINT = "vllm-0.33.0-" + hashlib.sha256(b"fakemodel").hexdigest()[:8]
TOKEN_RE = re.compile(r"\s*(?:\w+|[^\w\s])")
QUESTION_RE = re.compile(r"(-?\d+)\s*([-+*x×/])\s*(-?\d+)")
TOOL_TRIGGER = "use the calculator"
RIGHT_THRESHOLD = 166  # out of 256: about 65 % right


# --------------------------------------------------------------------------- tokens


def tokenize(text: str) -> list[str]:
    """Split text into tokens that join back to the exact text."""
    toks = TOKEN_RE.findall(text)
    consumed = sum(len(t) for t in toks)
    if consumed < len(text):  # only trailing whitespace can be left over
        if toks:
            toks[-1] += text[consumed:]
        else:
            toks = [text]
    return toks


def count_tokens(text: str | None) -> int:
    return len(tokenize(text)) if text else 0


def cut_tokens(text: str, n: int) -> str:
    return "".join(tokenize(text)[:n])


def _sha(s: str) -> bytes:
    return hashlib.sha256(s.encode("utf-8")).digest()


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Vocab:
    """id -> token string, read from a HuggingFace tokenizer.json (no dependency)."""

    def __init__(self, path: str | None):
        self.id_to_tok: dict[int, str] = {}
        if not path:
            return
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for tok, i in (data.get("model", {}).get("vocab") or {}).items():
            self.id_to_tok[int(i)] = tok
        for added in data.get("added_tokens") or []:
            self.id_to_tok[int(added["id"])] = added["content"]

    def size(self) -> int:
        return max(self.id_to_tok) + 1 if self.id_to_tok else 50000

    def tok(self, i: int) -> str:
        return self.id_to_tok.get(i, f"<{i}>")


# --------------------------------------------------------------------------- answers


def find_question(text: str) -> tuple[int, str, int, int] | None:
    """The last arithmetic question in text: (a, op, b, correct value)."""
    matches = list(QUESTION_RE.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    if op == "+":
        v = a + b
    elif op == "-":
        v = a - b
    elif op in "*x×":
        v = a * b
    else:
        v = a // b if b else 0
    return a, op, b, v


OP_WORDS = {"+": "plus", "-": "minus", "*": "times", "x": "times", "×": "times", "/": "divided by"}


def believed_value(key: str, k: int, correct: int) -> int:
    h = _sha(f"{key}|{k}")
    if h[0] < RIGHT_THRESHOLD:
        return correct
    delta = 1 + h[2] % 3
    return correct + delta if h[3] % 2 else correct - delta


CHAT_PHRASINGS = [
    "The answer is {v}.",
    "Sure! The answer is {v}.",
    "Let me see. The answer is {v}.",
]


SUBMISSION_RE = re.compile(r"\[Submission\]:(.*?)\*{3}", re.S)
CRITERION_RE = re.compile(r"\[(?:Criterion|Expert)\]:(.*?)\*{3}", re.S)


ACTUAL_RE = re.compile(r"Actual Output:\n(.*?) \n\n", re.S)
EXPECTED_RE = re.compile(r"Expected Output:\n(.*?) \n\n", re.S)


def judge_answer(key: str, text: str) -> str | None:
    """A grader's verdict when `text` asks for one. inspect_ai's model-graded templates ask
    for `GRADE: $LETTER`: C when the criterion's (or the expert's) text is in the
    submission, else I (without those parts: C or I by the prompt's hash). deepeval's GEval
    asks for JSON with a `score` from 0 to 10 after its `Evaluation Steps:`: 10 when the
    expected output's text is in the actual output, else 0."""
    if "Evaluation Steps:" in text and '"score"' in text:
        actual, expected = ACTUAL_RE.search(text), EXPECTED_RE.search(text)
        meets = actual is not None and expected is not None and \
            bool(expected[1].strip()) and expected[1].strip() in actual[1]
        reason = "The actual output " + ("states" if meets else "lacks") + " the expected value."
        return json.dumps({"reason": reason, "score": 10 if meets else 0})
    if "GRADE: $LETTER" not in text:
        return None
    submission, criterion = SUBMISSION_RE.search(text), CRITERION_RE.search(text)
    if submission is None or criterion is None:
        return "GRADE: " + ("C" if _sha(key)[0] < RIGHT_THRESHOLD else "I")
    meets = bool(criterion[1].strip()) and criterion[1].strip() in submission[1]
    return (f"The submission {'meets' if meets else 'misses'} the criterion.\n\n"
            f"GRADE: {'C' if meets else 'I'}")


def chat_answer(key: str, k: int, text: str) -> tuple[str | None, str]:
    """(reasoning or None, content) for a chat prompt whose last user text is `text`."""
    if (verdict := judge_answer(key, text)) is not None:
        return None, verdict
    h = _sha(f"{key}|{k}")
    q = find_question(text)
    if q is None:
        return None, "I can only answer arithmetic questions."
    a, op, b, correct = q
    v = believed_value(key, k, correct)
    content = CHAT_PHRASINGS[0 if k == 0 else k % len(CHAT_PHRASINGS)].format(v=v)
    reasoning = f"{a} {OP_WORDS[op]} {b} is {v}." if h[1] < 128 else None
    return reasoning, content


def completion_answer(key: str, k: int, prompt_text: str) -> str:
    q = find_question(prompt_text)
    if q is None:
        return " I can only answer arithmetic questions.\n\n"
    *_, correct = q
    v = believed_value(key, k, correct)
    return f" The answer is {v}.\n\nQuestion: What is {v} + 1?\nAnswer:"


def message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


# --------------------------------------------------------------------------- logprobs


def token_logprob(prev_text: str, tok: str) -> tuple[float, str | None, float]:
    """(logprob of tok after prev_text, greedy alternative (None: tok is greedy), its logprob)."""
    h = _sha(f"{prev_text[-40:]}|{tok}")
    lp = -round(0.5 + int.from_bytes(h[:2], "big") % 4000 / 1000.0, 3)
    stripped = tok.strip()
    q = find_question(prev_text)
    if q is not None and re.fullmatch(r"-?\d+", stripped) and re.search(r"\?[^\d?]*$", prev_text):
        # a number right after the (last) question: prefer the value the model "believes",
        # keyed by the question text, so every candidate answer sees the same belief
        qtext = prev_text[: prev_text.rfind("?") + 1]
        believed = believed_value(qtext, 0, q[3])
        if int(stripped) == believed:
            return -0.05, None, -0.05
        return -round(3.0 + h[2] / 255.0, 4), str(believed), -0.05
    if lp > -0.8:
        return lp, None, lp
    return lp, "the", -0.3


def logprob_block(tokens: list[str], start_text: str, k: int) -> dict[str, Any]:
    """vLLM completions `logprobs` for `tokens` following `start_text` (echo: start_text="")."""
    out: dict[str, list[Any]] = {
        "text_offset": [],
        "token_logprobs": [],
        "tokens": [],
        "top_logprobs": [],
    }
    text = start_text
    for i, tok in enumerate(tokens):
        out["text_offset"].append(len(text))
        out["tokens"].append(tok)
        if i == 0 and not start_text:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
        else:
            lp, alt, alt_lp = token_logprob(text, tok)
            top = {tok: lp}
            if k >= 1 and alt is not None and alt != tok:
                top[alt] = alt_lp
            out["token_logprobs"].append(lp)
            out["top_logprobs"].append(top)
        text += tok
    return out


def chat_logprobs(content: str | None, prev: str, top_n: int | None) -> dict[str, Any]:
    items = []
    text = prev
    for tok in tokenize(content or ""):
        lp, alt, alt_lp = token_logprob(text, tok)
        top = [{"token": tok, "logprob": lp, "bytes": list(tok.encode())}]
        if alt is not None and alt != tok:
            top.append({"token": alt, "logprob": alt_lp, "bytes": list(alt.encode())})
        items.append(
            {
                "token": tok,
                "logprob": lp,
                "bytes": list(tok.encode()),
                "top_logprobs": top[: top_n or 0],
            }
        )
        text += tok
    return {"content": items}


# --------------------------------------------------------------------------- state


class FakeModel:
    def __init__(
        self,
        models: list[str] | None = None,
        log_path: str | None = None,
        tokenizer_path: str | None = None,
    ):
        self.models = models or [DEFAULT_MODEL]
        self.log_path = log_path
        self.vocab = Vocab(tokenizer_path)
        self.counters: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()
        self.created = int(time.time())

    def next_counter(self, key: str) -> int:
        with self.lock:
            c = self.counters[key]
            self.counters[key] = c + 1
            return c

    def log(self, entry: dict[str, Any]) -> None:
        if not self.log_path:
            return
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        with self.lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line)

    def sample_indices(self, key: str, n: int, temperature: float) -> list[int]:
        if temperature and temperature > 0:
            c = self.next_counter(key)
            return [c * n + j for j in range(n)]
        return list(range(n))


def _limit(
    reasoning: str | None, content: str, stop: list[str], max_tokens: int | None
) -> tuple[str | None, str | None, str, str | None]:
    """Apply stop strings then max_tokens: (reasoning, content, finish_reason, stop_reason)."""
    finish, stop_reason = "stop", None
    first = None
    for s in stop:
        if s and s in content:
            p = content.index(s)
            if first is None or p < first[0]:
                first = (p, s)
    if first is not None:
        content = content[: first[0]]
        stop_reason = first[1]
    r_toks = count_tokens(reasoning)
    c_toks = count_tokens(content)
    if max_tokens is not None and r_toks + c_toks > max_tokens:
        finish, stop_reason = "length", None
        if max_tokens <= r_toks:
            reasoning = cut_tokens(reasoning or "", max_tokens)
            return reasoning, None, finish, stop_reason
        content = cut_tokens(content, max_tokens - r_toks)
    return reasoning, content, finish, stop_reason


def _stop_list(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else [s for s in stop if isinstance(s, str)]


def _max_tokens(body: dict[str, Any]) -> int | None:
    v = body.get("max_completion_tokens", body.get("max_tokens"))
    return int(v) if v is not None else None


def chat_prompt_tokens(messages: list[dict[str, Any]], tools: Any) -> int:
    n = 1
    for m in messages:
        n += 3 + count_tokens(message_text(m.get("content")))
        for tc in m.get("tool_calls") or []:
            n += count_tokens(json.dumps(tc.get("function", {})))
    if tools:
        n += count_tokens(json.dumps(tools))
    return n
