"""Miss diagnostics: the nearest saved prompt, and where a request first differs from it.

Prompts are flattened into strings whose order follows the prompt's structure (message by
message, then the rest), and kept sorted; the saved prompt sharing the longest prefix with a
request is then one of the two neighbours of the request's insertion point (bisect), so a
miss costs O(log n) once the catalog exists. The catalog is built the first time a model
misses, from the same records the index was built from: a run with no misses pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from . import keys

_MSG, _ROLE, _REST = "\x1e", "\x1f", "\x1d"
EXCERPT = 24


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def flatten(prompt: dict[str, Any]) -> str:
    rest = {k: v for k, v in prompt.items() if k not in ("messages", "prompt", "v")}
    if "messages" in prompt:
        body = "".join(
            _MSG + _text(m.get("role")) + _ROLE + _text(m.get("content"))
            + _ROLE + _text({k: v for k, v in m.items() if k not in ("role", "content")})
            for m in prompt["messages"]
        )
    else:
        p = prompt["prompt"]
        body = _MSG + (p if isinstance(p, str) else ",".join(map(str, p)))
    return body + _REST + _text(rest)


@dataclass
class Catalog:
    """Saved prompts sorted by their flattened form. Only the canonical JSON of each is
    kept (an exact-size copy: orjson's own result holds several times its size); the
    flattened form is recomputed for the few prompts a search looks at."""

    prompts: list[bytes]
    wheres: list[str]

    @classmethod
    def build(cls, saved: Iterable[tuple[dict[str, Any], str]]) -> Catalog:
        unique: dict[bytes, tuple[str, str]] = {}
        for prompt, where in saved:
            canonical = memoryview(keys.canonical(prompt)).tobytes()
            if canonical not in unique:
                unique[canonical] = (flatten(prompt), where)
        rows = sorted(unique.items(), key=lambda item: item[1][0])
        return cls([canonical for canonical, _ in rows], [where for _, (_, where) in rows])

    def nearest(self, prompt: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
        best = closest(lambda i: _flat(self.prompts[i]), len(self.prompts), flatten(prompt))
        if best is None:
            return None
        return orjson.loads(self.prompts[best]), self.wheres[best]


class PromptCatalog(Protocol):
    """Anything that finds the saved prompt nearest to a request: this module's in-memory
    Catalog, or the one an index file keeps (store.StoredCatalog)."""

    def nearest(self, prompt: dict[str, Any]) -> tuple[dict[str, Any], str] | None: ...


def closest(flat_at: Callable[[int], str], count: int, flat: str) -> int | None:
    """Of `count` items sorted by their flattened form (`flat_at(i)`), the one sharing the
    longest prefix with `flat`: a neighbour of its insertion point, found by bisection."""
    low, high = 0, count
    while low < high:
        mid = (low + high) // 2
        if flat_at(mid) < flat:
            low = mid + 1
        else:
            high = mid
    around = [i for i in (low - 1, low) if 0 <= i < count]
    if not around:
        return None
    return max(around, key=lambda i: _common(flat_at(i), flat))


def _flat(canonical: bytes) -> str:
    return flatten(orjson.loads(canonical))


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _excerpt(text: str, at: int) -> str:
    start = max(0, at - EXCERPT)
    piece = text[start:at + EXCERPT]
    return ("…" if start else "") + orjson.dumps(piece).decode()[1:-1] + (
        "…" if at + EXCERPT < len(text) else "")


def _text_diff(asked: str, saved: str, what: str) -> str:
    at = _common(asked, saved)
    return (f"{what}, character {at}: requested \"{_excerpt(asked, at)}\" vs saved "
            f"\"{_excerpt(saved, at)}\"")


def first_difference(asked: dict[str, Any], saved: dict[str, Any]) -> str:
    """Where `asked` first differs from `saved`, in words a user can act on."""
    if "messages" in asked and "messages" in saved:
        return _messages_diff(asked["messages"], saved["messages"]) or _rest_diff(asked, saved)
    if "prompt" in asked and "prompt" in saved:
        a, s = asked["prompt"], saved["prompt"]
        if isinstance(a, str) and isinstance(s, str):
            if a != s:
                return _text_diff(a, s, "the prompt")
        elif isinstance(a, list) and isinstance(s, list):
            if a != s:
                at = _common_list(a, s)
                return (f"the token ids differ at token {at}: requested {a[at:at + 5]} vs "
                        f"saved {s[at:at + 5]} ({len(a)} vs {len(s)} tokens)")
        else:
            return "the request sends the prompt as " + (
                "a string" if isinstance(a, str) else "token ids") + ", the saved one as " + (
                "a string" if isinstance(s, str) else "token ids")
        return _rest_diff(asked, saved)
    return "the request is for another endpoint"


def _common_list(a: list[Any], b: list[Any]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _messages_diff(asked: list[Any], saved: list[Any]) -> str | None:
    for i, (a, s) in enumerate(zip(asked, saved, strict=False)):
        if a == s:
            continue
        where = f"message {i}"
        if a.get("role") != s.get("role"):
            return f"{where}: role {a.get('role')!r} vs saved {s.get('role')!r}"
        ac, sc = a.get("content"), s.get("content")
        if ac != sc:
            if isinstance(ac, str) and isinstance(sc, str):
                return _text_diff(ac, sc, f"{where} ({a.get('role')})")
            return f"{where} ({a.get('role')}): the content differs in structure"
        fields = sorted(k for k in a.keys() | s.keys() if a.get(k) != s.get(k))
        return f"{where} ({a.get('role')}): field(s) {', '.join(fields)} differ"
    if len(asked) != len(saved):
        return (f"the request has {len(asked)} messages, the saved prompt {len(saved)}; "
                f"the first {min(len(asked), len(saved))} are equal")
    return None


def _rest_diff(asked: dict[str, Any], saved: dict[str, Any]) -> str:
    fields = sorted(k for k in asked.keys() | saved.keys()
                    if k not in ("messages", "prompt") and asked.get(k) != saved.get(k))
    return f"the prompt text is equal, but {', '.join(fields) or 'nothing'} differ(s)"
