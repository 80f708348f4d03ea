"""A small google-genai session, the script of docs/recipes/google-genai.md: a question
asked plainly, one streamed, one by the async client, a token count, and a chat of three
turns with thinking on (the last streamed).

It names no server and no key: `genai.Client()` reads GOOGLE_GEMINI_BASE_URL and
GOOGLE_API_KEY, which `replay-server run` sets (and which point it at `record` when the
session is recorded: tests/data/gen/make_recordings.py).
"""

import asyncio

from google import genai
from google.genai import types

MODEL = "gemini-fake"
GREEDY = types.GenerateContentConfig(temperature=0)
THINKING = types.GenerateContentConfig(
    temperature=0, thinking_config=types.ThinkingConfig(include_thoughts=True))

client = genai.Client()
print(client.models.generate_content(model=MODEL, contents="What is 12 + 7?",
                                     config=GREEDY).text)
print("".join(chunk.text or "" for chunk in client.models.generate_content_stream(
    model=MODEL, contents="What is 3 + 7?", config=GREEDY)))
print(client.models.count_tokens(model=MODEL, contents="What is 12 + 7?").total_tokens)


async def asked_async() -> str | None:
    async with client.aio as aio:
        answer = await aio.models.generate_content(model=MODEL, contents="What is 9 * 8?",
                                                   config=GREEDY)
    return answer.text


print(asyncio.run(asked_async()))
chat = client.chats.create(model=MODEL, config=THINKING)
for question in ("What is 3 + 4?", "And what is 5 * 6?"):
    print(chat.send_message(question).text)
print("".join(chunk.text or "" for chunk in chat.send_message_stream("And what is 8 - 2?")))
