"""The --html page: self-contained (nothing fetched, no script), valid, every saved text
escaped, each flip's texts side by side."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner

from replay_server.cli import main

from .support import copied_samples, rewrite_rows, samples

VOID = {"meta", "br", "rect", "hr", "img", "link", "input"}


class Tree(HTMLParser):
    """Checks that every element is closed in order; collects tags and attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += attrs
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "rect":
            return
        assert self.open and self.open[-1] == tag, (self.open, tag)
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def page(tmp_path: Path, original: Path, rescored: Path) -> tuple[str, Tree]:
    out = tmp_path / "compare.html"
    result = CliRunner().invoke(main, ["compare", str(original), str(rescored), "--html",
                                       str(out)])
    assert result.exit_code == 1, result.output
    text = out.read_text(encoding="utf-8")
    tree = Tree()
    tree.feed(text)
    tree.close()
    assert not tree.open
    return text, tree


def test_the_page_is_self_contained_and_shows_each_flip_side_by_side(tmp_path: Path) -> None:
    text, tree = page(tmp_path, samples("completions_batch"), samples("tokenized_gen"))
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?://", text)
    assert not {"script", "link", "img", "iframe", "object"} & set(tree.tags)
    assert not [a for a in tree.attributes if a[0] in ("src", "href")]
    assert tree.tags.count("svg") == 1 and tree.tags.count("rect") == 2  # agree, flipped
    words = " ".join(tree.text)
    assert "NOT certified: 2 flipped verdict(s)" in words
    flip = text.split('<div class="flip">')[1].split("</div>")[0]
    assert flip.count("<td>") == 2  # original | rescored
    assert " The answer is 22." in flip and " The answer is 19." in flip


def test_every_saved_text_is_escaped(tmp_path: Path) -> None:
    hostile = "</pre><script>alert(1)</script> & <b>The answer is 5.</b>"
    rescored = rewrite_rows(copied_samples("completions_batch", tmp_path / "run"),
                            lambda rows: [{**r, "resps": [[hostile]], "exact_match": 0.0}
                                          if r["doc_id"] == 2 else r for r in rows])
    text, tree = page(tmp_path, samples("completions_batch"), rescored)
    assert "script" not in tree.tags and "b" not in tree.tags
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;" in text
    assert hostile in " ".join(tree.text).replace("\n", "")
