"""A deterministic, test-only OpenAI-compatible model server (a stand-in for vLLM).

It answers simple arithmetic questions ("What is 12 + 7?") found in the prompt, right
for some prompts and wrong for others, so that harness scores are neither 0 nor 100 %.
Nothing here is used by `replay_server`: it only exists to produce and test real
harness outputs without a GPU.

Behaviour (see tests/fakemodel/README.md for the summary):

* Tokenizer (for `usage`, `max_tokens` and logprobs): a token is a run of word
  characters or a single other non-space character, together with the whitespace
  before it (`TOKEN_RE`); joining the tokens gives back the text exactly (trailing
  whitespace is glued to the last token). A chat prompt is counted as
  3 tokens per message + its content tokens + 1.
* Completions prompts given as token ids are treated opaquely, except that when a
  HuggingFace `tokenizer.json` is named by `FAKEMODEL_TOKENIZER` (or `tokenizer_path=`)
  its vocabulary maps ids to token strings (joined with single spaces, as a WordLevel
  tokenizer without a decoder does) so that the arithmetic question can be read.
* The answer depends only on the prompt key (canonical JSON of messages + tools, or of
  one completions prompt) and on the sample index k. sha256(f"{key}|{k}") decides:
  right or wrong (about 65 % right), whether a chat answer carries `reasoning`,
  and the wrong value. Sample k of n uses k = j; with `temperature > 0` a per-prompt
  call counter c makes k = c * n + j, so identical sampled requests differ while
  `temperature == 0` requests are stateless.
* Chat answer: "The answer is 19." (k > 0 may use other phrasings); reasoning
  "12 plus 7 is 19.". Completions answer: " The answer is 19.\n\nQuestion: What is
  19 + 1?\nAnswer:" (the model "rambles on", so stop strings matter).
* `stop`: text is cut before the first occurrence (finish_reason "stop",
  stop_reason = the stop string). `max_tokens` smaller than the (reasoning + content)
  token count: cut at max_tokens tokens, finish_reason "length"; when the cut falls
  inside the reasoning, content is null (as vLLM does).
* Tools: if `tools` are given and the last message is a user message containing
  "use the calculator" (any case), the answer is a tool call (finish_reason
  "tool_calls"); when the last message is a `tool` message, the answer uses its result.
* `/v1/completions` with `echo` + `logprobs` (lm-eval loglikelihood): text = prompt
  + one generated token, `logprobs.tokens/token_logprobs/top_logprobs/text_offset`
  cover prompt + generated token; the first entries are null. A number token that
  follows an arithmetic question gets a high logprob when it is the value the model
  "believes" (right or wrong by the hash), so multiple-choice accuracy is between 0
  and 1.
* `FAKEMODEL_LOG=path` (or `log_path=`) appends one JSON line per POST:
  {"path", "request", "response"} (+ "status" for errors, "chunks" for streams; the
  "response" of a stream is the equivalent non-streamed body).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakemodel.anthropic_api import routes as anthropic_routes
from tests.fakemodel.anthropic_batches import routes as message_batch_routes
from tests.fakemodel.behaviour import FakeModel
from tests.fakemodel.bodies import build_chat, build_completion, chat_chunks, completion_chunks
from tests.fakemodel.faults import Faults, respond
from tests.fakemodel.gemini_api import asks_google, model_list
from tests.fakemodel.gemini_api import routes as gemini_routes
from tests.fakemodel.openai_batches import routes as batch_routes
from tests.fakemodel.responses_api import routes as responses_routes
from tests.fakemodel.tokenizer_api import routes as tokenizer_routes


def _error(message: str, status: int = 400, param: str | None = None) -> JSONResponse:
    body = {
        "error": {
            "message": message,
            "type": "Bad Request" if status == 400 else "NotFoundError",
            "param": param,
            "code": status,
        }
    }
    return JSONResponse(body, status_code=status)


# --------------------------------------------------------------------------- app


def create_app(
    models: list[str] | None = None, log_path: str | None = None, tokenizer_path: str | None = None
) -> Starlette:
    fm = FakeModel(
        models,
        log_path or os.environ.get("FAKEMODEL_LOG"),
        tokenizer_path or os.environ.get("FAKEMODEL_TOKENIZER"),
    )
    faults = Faults()

    async def handle(request: Request, kind: str) -> Response:
        path = request.url.path
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as e:
            resp = _error(f"invalid JSON body: {e}")
            fm.log({"path": path, "request": None, "status": 400,
                    "response": json.loads(bytes(resp.body))})
            return resp
        if kind == "chat" and (fault := faults.of(body)) is not None:
            fm.log({"path": path, "request": body, "fault": fault})
            return await respond(fault, request)
        try:
            if kind == "chat":
                if not isinstance(body.get("messages"), list):
                    raise KeyError("messages")
                out = build_chat(fm, body)
            else:
                if "prompt" not in body:
                    raise KeyError("prompt")
                out = build_completion(fm, body)
        except KeyError as e:
            param = str(e).strip("'")
            resp = _error(f"1 validation error: field '{param}' is required", param=param)
            fm.log({"path": path, "request": body, "status": 400,
                    "response": json.loads(bytes(resp.body))})
            return resp
        except (ValueError, TypeError) as e:
            resp = _error(str(e))
            fm.log({"path": path, "request": body, "status": 400,
                    "response": json.loads(bytes(resp.body))})
            return resp
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = (chat_chunks if kind == "chat" else completion_chunks)(out, include_usage)
            fm.log({"path": path, "request": body, "response": out, "chunks": chunks})

            async def gen() -> AsyncIterator[str]:
                for c in chunks:
                    yield f"data: {json.dumps(c, ensure_ascii=False)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(gen(), media_type="text/event-stream")
        fm.log({"path": path, "request": body, "response": out})
        return JSONResponse(out)

    async def chat(request: Request) -> Response:
        return await handle(request, "chat")

    async def completions(request: Request) -> Response:
        return await handle(request, "completions")

    async def list_models(request: Request) -> Response:
        if asks_google(request):  # Gemini's `GET /v1/models` (the SDK's default version)
            return await model_list(fm, request)
        data: list[dict[str, Any]] = [
            {
                "id": m,
                "object": "model",
                "created": fm.created,
                "owned_by": "vllm",
                "root": m,
                "parent": None,
                "max_model_len": 4096,
                "permission": [],
            }
            for m in fm.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def version(request: Request) -> Response:
        return JSONResponse({"version": "0.33.0"})

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        *responses_routes(fm),
        *tokenizer_routes(fm),
        *anthropic_routes(fm),
        *message_batch_routes(),
        *batch_routes(),
        *gemini_routes(fm),
    ]
    app = Starlette(routes=routes)
    app.state.fakemodel = fm
    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    p = argparse.ArgumentParser(
        description="deterministic fake OpenAI-compatible model server (tests only)"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--model", action="append", help="served model name (repeatable; default tiny-model)"
    )
    p.add_argument(
        "--log", default=None, help="append request/response JSON lines here (or FAKEMODEL_LOG)"
    )
    p.add_argument(
        "--tokenizer", default=None, help="tokenizer.json (or its dir) to decode token-id prompts"
    )
    a = p.parse_args(argv)
    app = create_app(a.model, a.log, a.tokenizer)
    uvicorn.run(app, host=a.host, port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
