"""vLLM's tokenizer endpoints (`POST /tokenize`, `POST /detokenize`, `GET /tokenizer_info`),
served at the root as vLLM serves them: their requests' field tables (`fields.py`), and
how a request is checked and keyed (`request.py`).

This is a package of its own and not an API `Family` (`wire/family.py`): a family's
contract is a generation (saved samples, `n`, streams in and out, usage), and a tokenizer
answer is none of those. It is a deterministic function of the model's tokenizer and the
request, so one recorded answer is the answer to every request with the same key, always,
and no sample is ever used up or left unused. Keys come from the same engine as every
family's (`keys.Table`, `key_of`, `KEY_VERSION`), with a kind of their own per form, so a
tokenizer key can never equal a generation's. What answers (recorded, or computed with
`--tokenizer`) is decided in `replay/tokenizer.py`.
"""

from .request import TokenizerRequest, answer_problem, check, key, parse, table_of

__all__ = ["TokenizerRequest", "answer_problem", "check", "key", "parse", "table_of"]
