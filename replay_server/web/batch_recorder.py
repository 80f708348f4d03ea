"""The recorder's batch jobs: OpenAI's Files and Batches, Anthropic's Message Batches, passed
through to the upstream untouched, and each line of a batch saved as the native record of
its endpoint once its result comes through, exactly as if the line's request had been sent
alone (its request body, its response body).

A batch's results carry no request, so what was sent is kept, in memory only and by
`custom_id`, while the batch is pending: an OpenAI upload's lines (`POST /v1/files`), by
the file's id; a Message Batches create body's requests, by the batch's id. A batch
object that passes by ties OpenAI's output and error files to their input file. When the
results are downloaded through the recorder (OpenAI: `GET /v1/files/{id}/content` of an
output or error file; Anthropic: the batch's results), each result line is joined to its
request, read by the same batch formats that import saved batch files
(`saved/formats/openai_batch.py`, `anthropic_batch.py`: what a result line answers, and
why a failed, `errored`, canceled or expired one does not), and saved; a line that did not
answer is an unusable record saying why. Each line is saved once, then forgotten: a
second batch over one input file is counted and warned of, its answers not saved.

Anthropic's `results_url` is absolute, and the SDK follows it as it is: a batch object
naming the upstream's results is passed on naming the recorder's, so that the results
come through it. Lines whose results never came through (a batch cancelled, its results
fetched elsewhere, the recorder stopped first) are not saved, and the recorder's summary
says how many.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import Request
from fastapi.responses import Response

from ..errors import BadRequest, LoadError
from ..saved.formats.anthropic_batch import AnthropicBatchFormat
from ..saved.formats.batch_files import BatchFormat, BatchLine, NoAnswer
from ..saved.formats.openai_batch import OpenAIBatchFormat
from ..wire.batches.anthropic import ENDPOINT, request_headers
from ..wire.families import ENDPOINTS, family_of
from .batches import PATHS as BATCH_PATHS
from .upload import read_form

if TYPE_CHECKING:  # (the recorder makes its batch side: a name for its type only)
    from .recorder import Recorder

log = logging.getLogger(__name__)
FILES, BATCHES, MESSAGE_BATCHES = BATCH_PATHS  # (and every path below them)
_CONTENT = re.compile(r"/v1/files/([^/]+)/content")
_RESULTS = re.compile(r"/v1/messages/batches/([^/]+)/results")
_OPENAI, _ANTHROPIC = OpenAIBatchFormat(), AnthropicBatchFormat()
Pending = dict[str, dict[str, Any]]  # custom_id -> the request line, as it was sent


class BatchRecorder:
    """What the recorder keeps of each pending batch, and the saving of its lines."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.uploads: dict[str, Pending] = {}  # OpenAI: an input file's id -> its lines
        self.results_of: dict[str, str] = {}  # OpenAI: output/error file -> input file
        self.batches: dict[str, Pending] = {}  # Anthropic: a batch's id -> its requests
        self.first: dict[str, str] = {}  # OpenAI: an input file -> the first batch over it
        self.again: set[str] = set()  # OpenAI: the batches said not saved (`_another`)

    def pending(self) -> int:
        """The lines sent whose results have not come through yet."""
        return sum(len(lines) for lines in [*self.uploads.values(), *self.batches.values()])

    async def forward(self, request: Request) -> Response:
        """Forward one call of a batch protocol, and note or save what it carries."""
        body, path = await request.body(), request.url.path
        reply = await self.recorder.exchange(request.method, path, request.headers,
                                             str(request.query_params), body, request.receive)
        if reply.status_code != 200:
            return reply
        content = bytes(reply.body)
        if request.method == "POST" and path == FILES:
            self._uploaded(request.headers.get("content-type", ""), body, content)
        elif request.method == "POST" and path == MESSAGE_BATCHES:
            self._created(body, request.scope["headers"], content)
            return _rewritten(reply, content, self.recorder.base, str(request.base_url))
        elif (found := _CONTENT.fullmatch(path)) and found[1] in self.results_of:
            await self._save(_OPENAI, self.uploads[self.results_of[found[1]]], content,
                             found[1])
        elif found := _RESULTS.fullmatch(path):
            await self._save(_ANTHROPIC, self.batches.get(found[1], {}), content, found[1])
        elif path.startswith(BATCHES):
            self._ties(_json(content))
        elif path.startswith(MESSAGE_BATCHES):
            return _rewritten(reply, content, self.recorder.base, str(request.base_url))
        return reply

    def _uploaded(self, content_type: str, body: bytes, answer: bytes) -> None:
        """An upload for a batch: its lines kept by custom_id, under the file's id."""
        try:
            form = read_form(content_type, body)
        except BadRequest:
            return  # (the upstream said what it makes of it)
        file, purpose, made = form.get("file"), form.get("purpose"), _json(answer)
        if file is None or purpose is None or bytes(purpose.data) != b"batch" \
                or not isinstance(made, dict) or not isinstance(made.get("id"), str):
            return
        self.uploads[made["id"]] = _by_custom_id(
            _json(line) for line in bytes(file.data).splitlines() if line.strip())

    def _created(self, body: bytes, headers: list[tuple[bytes, bytes]], answer: bytes
                 ) -> None:
        """A Message Batch created: its requests kept by custom_id, under its id, each
        with the create's headers that are its fields, as the replay side reads them
        (`request_headers`: a beta applies to each request, the batch API's own to none)."""
        sent, made = _json(body), _json(answer)
        if isinstance(sent, dict) and isinstance(sent.get("requests"), list) \
                and isinstance(made, dict) and isinstance(made.get("id"), str):
            fields, messages = request_headers(headers), family_of(ENDPOINT)
            self.batches[made["id"]] = _by_custom_id(
                {**item, "params": messages.with_headers(item["params"], fields)}
                if isinstance(item, dict) and isinstance(item.get("params"), dict) else item
                for item in sent["requests"])

    def _ties(self, answer: Any) -> None:
        """Each OpenAI batch object (or list of them) ties its output and error files to
        its input file."""
        found = answer.get("data") if isinstance(answer, dict) else None
        for batch in found if isinstance(found, list) else [answer]:
            if not isinstance(batch, dict) or batch.get("object") != "batch" \
                    or not isinstance(batch.get("id"), str):
                continue
            source = batch.get("input_file_id")
            if source in self.first or source in self.uploads:
                self._another(batch["id"], self.first.setdefault(source, batch["id"]), source)
            if source in self.uploads:
                for name in ("output_file_id", "error_file_id"):
                    if isinstance(batch.get(name), str):
                        self.results_of[batch[name]] = source

    def _another(self, batch: str, first: str, source: str) -> None:
        """A second batch over one input file: each line is saved once, then forgotten,
        so one batch's answers only are saved (the results downloaded first); the other's
        are said not to be (counted, warned), once."""
        if batch != first and batch not in self.again:
            self.again.add(batch)
            why = (f"batch {batch} runs input file {source} again (batch {first} ran it): "
                   "each line of an upload is saved once, from the results downloaded "
                   "first; the other batch's answers are not saved")
            log.warning("%s", why)
            self.recorder.tally("unrecordable", why)

    async def _save(self, fmt: BatchFormat, lines: Pending, content: bytes, where: str
                    ) -> None:
        """Each result line joined to its request line, saved, and forgotten."""
        for number, text in enumerate(content.splitlines(), 1):
            result = _json(text)
            if not text.strip() or not isinstance(result, dict):
                continue
            sent = lines.pop(str(result.get("custom_id")), None)
            if sent is None:
                continue  # (saved already, or not sent through the recorder)
            try:  # (popped first: a download at the same time does not save it twice)
                await self._save_line(fmt, sent, BatchLine(where, number, sent["custom_id"],
                                                           result))
            except BaseException:  # a failed write: kept, for the download the client retries
                lines[sent["custom_id"]] = sent
                raise
        self.uploads = {k: v for k, v in self.uploads.items() if v}
        self.results_of = {k: v for k, v in self.results_of.items() if v in self.uploads}
        self.batches = {k: v for k, v in self.batches.items() if v}

    async def _save_line(self, fmt: BatchFormat, sent: dict[str, Any], result: BatchLine
                         ) -> None:
        given = BatchLine(result.file, 0, result.custom_id, sent)
        try:
            fmt.check_request(given)
            endpoint, answer = fmt.endpoint(given), fmt.answer(result)
        except LoadError as e:
            log.warning("batch line not recorded (%s): %s", result.where, e)
            self.recorder.tally("unrecordable", f"the batch line cannot be saved: {e}")
            return
        if endpoint not in ENDPOINTS:
            return  # (embeddings and the like: forwarded, never saved)
        origin = {"batch": result.file, "custom_id": result.custom_id}
        if isinstance(answer, NoAnswer):
            await self.recorder.save(endpoint, fmt.request(given), None,
                                     unusable=answer.why, origin=origin)
        else:
            await self.recorder.save(endpoint, fmt.request(given), answer, origin=origin)


def _json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _by_custom_id(lines: Any) -> Pending:
    return {line["custom_id"]: line for line in lines
            if isinstance(line, dict) and isinstance(line.get("custom_id"), str)}


def _rewritten(reply: Response, content: bytes, upstream: str, here: str) -> Response:
    """A Message Batches answer whose `results_url` (each batch's, in a list too) names
    the upstream, naming the recorder instead (`here`, its root as the client reached
    it)."""
    answer = _json(content)
    found = answer.get("data") if isinstance(answer, dict) else None
    changed = False
    for batch in found if isinstance(found, list) else [answer]:
        url = batch.get("results_url") if isinstance(batch, dict) else None
        if isinstance(url, str) and url.startswith(upstream + "/"):
            batch["results_url"] = here.rstrip("/") + url.removeprefix(upstream)
            changed = True
    if not changed:
        return reply
    headers = {k: v for k, v in reply.headers.items() if k != "content-length"}
    return Response(orjson.dumps(answer), reply.status_code, headers)
