"""The environment `run` gives COMMAND: every base-URL variable that the harnesses the docs
document read, each pointed at the replay in the form its reader expects, with its API key
variable set to the run's key.

Anthropic's clients take the server's root (no /v1) and its key from ANTHROPIC_API_KEY
(sent as `x-api-key`, which the replay accepts like a Bearer key). Google's SDK takes the
root too (it adds the API version itself) and its key from GOOGLE_API_KEY (sent as
`x-goog-api-key`); LiteLLM's `gemini/` models take the versioned root (`.../v1beta`, to
which they append `models/M:generateContent`).

Harnesses take their server from different variables, and some read one before another
(langchain-openai reads OPENAI_API_BASE before OPENAI_BASE_URL; camel-ai reads
OPENAI_API_BASE_URL first): a stale value of any of them left in the user's environment
would send a harness elsewhere, so `run` overrides them all, whatever they held. The docs'
list (docs/run.md) is generated from `VARIABLES`.

One variable is removed rather than set: inspect_ai's INSPECT_EVAL_MODEL_BASE_URL, which
its CLI reads as `--model-base-url` and which then beats the provider's own variable. No
single URL suits every provider (OpenAI's clients want the /v1 URL, Anthropic's the root,
and would post to /v1/v1/messages), so each provider is left to read its own, which the
table sets in its form; a stale value would otherwise send inspect elsewhere.

A variable the table cannot know (inspect_ai's `openai-api/SERVICE/MODEL` reads
SERVICE_BASE_URL and requires SERVICE_API_KEY, SERVICE being whatever the user named it) is
named with `run --base-url-var`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Variable:
    """One base-URL variable: its name, the form of URL its readers expect (`v1`:
    `http://HOST:PORT/v1`; `root`: the server's root; `unset`: removed from COMMAND's
    environment), the API key variable they read with it (None: `run` leaves the key
    alone), and who reads it."""

    name: str
    form: Literal["v1", "root", "v1beta", "unset"]
    key: str | None
    readers: str

    def url(self, base_url: str) -> str | None:
        """The replay's URL in this variable's form (None: unset); `base_url` is the /v1
        URL."""
        if self.form == "unset":
            return None
        if self.form == "v1beta":
            return base_url.removesuffix("/v1") + "/v1beta"
        return base_url if self.form == "v1" else base_url.removesuffix("/v1")


VARIABLES: tuple[Variable, ...] = (
    Variable("OPENAI_BASE_URL", "v1", "OPENAI_API_KEY",
             "openai-python and what builds on it (openai-agents, pydantic-ai, instructor, "
             "deepeval's judges, inspect_ai `openai/`), litellm `openai/` (oe-eval, "
             "lighteval, dspy)"),
    Variable("OPENAI_API_BASE", "v1", "OPENAI_API_KEY",
             "langchain-openai (before OPENAI_BASE_URL), litellm (after it), dspy"),
    Variable("OPENAI_API_BASE_URL", "v1", "OPENAI_API_KEY",
             "camel-ai (before OPENAI_BASE_URL)"),
    Variable("INSPECT_EVAL_MODEL_BASE_URL", "unset", None,
             "inspect_ai's `--model-base-url`, which beats the provider's own variable; "
             "without it each provider (graders included) reads its own"),
    Variable("VLLM_BASE_URL", "v1", "VLLM_API_KEY",
             "inspect_ai `vllm/` and `openai-api/vllm/`, pydantic-ai `vllm:`"),
    Variable("HOSTED_VLLM_API_BASE", "v1", "HOSTED_VLLM_API_KEY", "litellm `hosted_vllm/`"),
    Variable("OPENAI_LIKE_API_BASE", "v1", "OPENAI_LIKE_API_KEY", "litellm `openai_like/`"),
    Variable("LITELLM_API_BASE", "v1", "LITELLM_API_KEY", "deepeval `LiteLLMModel`"),
    Variable("LITELLM_PROXY_API_BASE", "v1", "LITELLM_PROXY_API_KEY",
             "deepeval `LiteLLMModel` (after LITELLM_API_BASE)"),
    Variable("LOCAL_MODEL_BASE_URL", "v1", "LOCAL_MODEL_API_KEY",
             "deepeval `LocalModel` (`deepeval set-local-model`)"),
    Variable("EVALSCOPE_BASE_URL", "v1", "EVALSCOPE_API_KEY",
             "evalscope `openai_api` without `--api-url`"),
    Variable("MODELSCOPE_API_BASE", "v1", None,
             "evalscope's LLM judge (its key, MODELSCOPE_SDK_TOKEN, is also the ModelScope "
             "hub login: left alone)"),
    Variable("OC_JUDGE_API_BASE", "v1", "OC_JUDGE_API_KEY", "OpenCompass's LLM judges"),
    # Anthropic's API: its clients append /v1/messages to the server's root
    Variable("ANTHROPIC_BASE_URL", "root", "ANTHROPIC_API_KEY",
             "the anthropic SDK and what builds on it (inspect_ai `anthropic/`, Claude "
             "Code), litellm `anthropic/` (newer, after ANTHROPIC_API_BASE)"),
    Variable("ANTHROPIC_API_BASE", "root", "ANTHROPIC_API_KEY", "litellm `anthropic/`"),
    Variable("ANTHROPIC_API_BASE_URL", "root", "ANTHROPIC_API_KEY",
             "scripts built on the anthropic SDK that read their own (camel-ai's examples)"),
    # Google's Gemini API: its SDK appends the version and models/M:generateContent
    Variable("GOOGLE_GEMINI_BASE_URL", "root", "GOOGLE_API_KEY",
             "the google-genai SDK (the Gemini Developer API) and what builds on it "
             "(inspect_ai `google/`, after GOOGLE_BASE_URL)"),
    Variable("GOOGLE_BASE_URL", "root", "GOOGLE_API_KEY", "inspect_ai `google/`"),
    Variable("GEMINI_API_BASE", "v1beta", "GEMINI_API_KEY",
             "litellm `gemini/` (its key: GOOGLE_API_KEY, else GEMINI_API_KEY)"),
)


def check_name(name: str) -> str:
    """`name` if it can be an environment variable's name (`--base-url-var`); else
    ValueError."""
    if not name.isidentifier() or not name.isascii():
        raise ValueError(f"--base-url-var {name!r}: not an environment variable name "
                         "(letters, digits and _, not starting with a digit)")
    return name


def environment(inherited: Mapping[str, str], base_url: str, api_key: str,
                named: Sequence[str] = ()) -> dict[str, str]:
    """COMMAND's environment under `run`: `inherited` with every variable of `VARIABLES`
    set (or removed) in its form of the replay's /v1 URL `base_url`, and each variable
    `named` (`--base-url-var`) at `base_url`, with their key variables at `api_key`. A
    named variable NAME_BASE_URL brings NAME_API_KEY."""
    env = dict(inherited)
    for variable in VARIABLES:
        url = variable.url(base_url)
        if url is None:
            env.pop(variable.name, None)
        else:
            env[variable.name] = url
        if variable.key is not None:
            env[variable.key] = api_key
    for name in map(check_name, named):
        env[name] = base_url
        if name.endswith("_BASE_URL") and name != "_BASE_URL":
            env[name.removesuffix("_BASE_URL") + "_API_KEY"] = api_key
    return env


def markdown_table() -> str:
    """The docs' list of the variables `run` sets (docs/run.md, generated from VARIABLES)."""
    rows = ["| variable | set to | key variable set | read by |", "| --- | --- | --- | --- |"]
    for v in VARIABLES:
        form = {"v1": "`http://HOST:PORT/v1`", "root": "`http://HOST:PORT`",
                "v1beta": "`http://HOST:PORT/v1beta`", "unset": "removed"}[v.form]
        rows.append(f"| `{v.name}` | {form} | {f'`{v.key}`' if v.key else 'none'} | "
                    f"{v.readers} |")
    return "\n".join(rows)
