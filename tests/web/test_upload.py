"""An upload's form read in memory (web/upload.py): a form cut short is refused, never
kept as a shorter file (a batch made of it would run fewer lines than the harness wrote,
and the lines lost would be no miss)."""

from __future__ import annotations

import pytest

from replay_server.errors import BadRequest
from replay_server.web.upload import read_form

TYPE = "multipart/form-data; boundary=XX"
FORM = (b'--XX\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        b'--XX\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n'
        b'{"custom_id": "q1"}\n{"custom_id": "q2"}\n\r\n--XX--\r\n')


def test_a_whole_form_is_read() -> None:
    form = read_form(TYPE, FORM)
    assert bytes(form["purpose"].data) == b"batch"
    assert form["file"].param("filename") == "in.jsonl"
    assert bytes(form["file"].data) == b'{"custom_id": "q1"}\n{"custom_id": "q2"}\n'


def test_a_form_without_its_last_crlf_is_read_whole() -> None:
    assert bytes(read_form(TYPE, FORM[:-2])["file"].data).endswith(b'"q2"}\n')


@pytest.mark.parametrize("end", [FORM.index(b"{") + len(b'{"custom_id": "q1"}\n'),
                                 len(FORM) - len(b"--\r\n")])
def test_a_form_cut_short_is_refused(end: int) -> None:
    """Cut after a whole line of the file, or before its closing boundary's `--`."""
    with pytest.raises(BadRequest, match="closing boundary"):
        read_form(TYPE, FORM[:end])
