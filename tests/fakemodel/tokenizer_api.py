"""vLLM's tokenizer endpoints on the fake model (`POST /tokenize`, `POST /detokenize`,
`GET /tokenizer_info`, at the root as vLLM serves them), in vLLM's shapes
(`vllm/entrypoints/serve/tokenize/protocol.py`: TokenizeResponse {count, max_model_len,
tokens, token_strs}, DetokenizeResponse {prompt}).

The fake tokenizer is bytes: a text's ids are its UTF-8 bytes plus 256, after the BOS id 1
when special tokens are added (on by default for a prompt, off for messages, as in vLLM);
messages are rendered `role: content` one per line, with `assistant:` last when the
generation prompt is added. Deterministic, and enough to tell every keyed field apart.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakemodel.behaviour import FakeModel

MAX_MODEL_LEN = 4096
BOS = 1


def _ids(text: str, special: bool) -> list[int]:
    return [BOS] * special + [b + 256 for b in text.encode()]


def _rendered(body: dict[str, Any]) -> str:
    lines = [f"{m['role']}: {m.get('content') or ''}" for m in body["messages"]]
    if body.get("add_generation_prompt", True):
        lines.append("assistant:")
    return "\n".join(lines)


def tokenize_body(body: dict[str, Any]) -> dict[str, Any]:
    if "prompt" in body:
        ids = _ids(body["prompt"], body.get("add_special_tokens", True))
    else:
        ids = _ids(_rendered(body), body.get("add_special_tokens", False))
    strs = [chr(i - 256) if i >= 256 else "<s>" for i in ids]
    return {"count": len(ids), "max_model_len": MAX_MODEL_LEN, "tokens": ids,
            "token_strs": strs if body.get("return_token_strs") else None}


def routes(fm: FakeModel) -> list[Route]:
    async def tokenize(request: Request) -> Response:
        body = json.loads(await request.body())
        out = tokenize_body(body)
        fm.log({"path": request.url.path, "request": body, "response": out})
        return JSONResponse(out)

    async def detokenize(request: Request) -> Response:
        body = json.loads(await request.body())
        text = bytes(i - 256 for i in body["tokens"] if i >= 256).decode(errors="replace")
        fm.log({"path": request.url.path, "request": body, "response": {"prompt": text}})
        return JSONResponse({"prompt": text})

    async def tokenizer_info(request: Request) -> Response:
        return JSONResponse({"tokenizer_class": "FakeByteTokenizer", "bos_token": "<s>",
                             "model_max_length": MAX_MODEL_LEN})

    return [Route("/tokenize", tokenize, methods=["POST"]),
            Route("/detokenize", detokenize, methods=["POST"]),
            Route("/tokenizer_info", tokenizer_info, methods=["GET"])]
