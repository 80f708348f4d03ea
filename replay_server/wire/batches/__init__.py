"""The batch protocols, as pure functions of JSON and bytes: OpenAI's Files and Batches
(`openai.py`) and Anthropic's Message Batches (`anthropic.py`), over what they share
(`job.py`: a batch as it ended, one outcome per line; its lists' pages).

A layer over the families, not a family (DESIGN.md): a batch has no prompt of its own.
Each of its lines is one request of a family's endpoint (chat, completions, Responses;
Anthropic's Messages), keyed and answered by that family's rules, through the replay
service as a single request is (`replay/batches/`); these modules only read a batch's
input (its lines, with their place and precise errors) and write its objects and result
lines in each API's own shapes. Nothing here knows the store, the index or HTTP.
"""
