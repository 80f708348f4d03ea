"""An upload's form (`multipart/form-data`), read in memory: the Files API's `file` and
`purpose`. Starlette's own form reader spools a file part over 1 MB to a temporary file
on disk, and nothing uploaded to a replay may be written to disk; so the body, already
received whole under the upload cap, is parsed here with python-multipart's parser."""

from __future__ import annotations

from email.message import Message

from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError

from ..errors import BadRequest


class Part:
    """One part of the form: its headers and its bytes."""

    def __init__(self) -> None:
        self.headers = Message()
        self.data = bytearray()
        self._name = b""
        self._value = b""

    def header_field(self, data: bytes, start: int, end: int) -> None:
        self._name += data[start:end]

    def header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def header_end(self) -> None:
        self.headers[self._name.decode("latin-1")] = self._value.decode("utf-8", "replace")
        self._name = self._value = b""

    def param(self, name: str) -> str | None:
        value = self.headers.get_param(name, header="content-disposition")
        return value if isinstance(value, str) else None


def _boundary(content_type: str) -> str:
    header = Message()
    header["content-type"] = content_type
    boundary = header.get_param("boundary")
    if header.get_content_type() != "multipart/form-data" or not isinstance(boundary, str):
        raise BadRequest("an upload is a multipart/form-data body (with its boundary), got "
                         f"Content-Type {content_type!r}")
    return boundary


def read_form(content_type: str, body: bytes) -> dict[str, Part]:
    """The form's parts by their field name (the first of a name); BadRequest for a body
    that is no such form."""
    parts: list[Part] = []

    def begin() -> None:
        parts.append(Part())

    def data(chunk: bytes, start: int, end: int) -> None:
        parts[-1].data += chunk[start:end]

    parser = MultipartParser(_boundary(content_type), {
        "on_part_begin": begin, "on_part_data": data,
        "on_header_field": lambda d, s, e: parts[-1].header_field(d, s, e),
        "on_header_value": lambda d, s, e: parts[-1].header_value(d, s, e),
        "on_header_end": lambda: parts[-1].header_end()})
    try:
        parser.write(body)
        parser.finalize()
    except FormParserError as e:
        raise BadRequest(f"the upload's form cannot be read: {e}") from None
    found: dict[str, Part] = {}
    for part in parts:
        name = part.param("name")
        if name is not None:
            found.setdefault(name, part)
    return found
