"""MkDocs hook: the reference pages, generated from the code each time the site is built.

A page says `<!-- generated: NAME -->` on a line of its own where the text that GENERATED
renders for NAME goes (the command-line reference from click's own objects, the settings
table, the request-field tables, the variables `run` sets, each command's exit statuses),
so generated text is never written into a page by hand and cannot drift from the code. The
hook also makes the README the site's home page (one text, read on GitHub and on the site),
and fails the build on any page that would load a script, stylesheet or font from another
host: the site must work offline.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

import click
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from replay_server import settings
from replay_server.cli import main
from replay_server.commands import base_urls, exits
from replay_server.paths import (
    CHAT_PATH,
    COMPLETION_PATH,
    COUNT_TOKENS_PATH,
    GEMINI_COUNT_PATH,
    GEMINI_PATH,
    MESSAGES_PATH,
    RESPONSES_PATH,
)
from replay_server.wire.families import fields_table
from replay_server.wire.keys import markdown_table
from replay_server.wire.tokenizer.fields import DETOKENIZE, TOKENIZE, TOKENIZE_CHAT

ROOT = Path(__file__).parents[2]
MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)
# a <script src=...> or <link href=...> on another host (a font or CDN asset)
REMOTE_ASSET = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//", re.I)


def cli_reference() -> str:
    """Every `replay-server` command: its usage, help and options, as `--help` has them."""
    root = click.Context(main, info_name="replay-server", **main.context_settings)
    parts = [_command(main, root)]
    for name, command in main.commands.items():  # in the order they are defined
        if not command.hidden:
            parts.append(_command(command, click.Context(command, info_name=name, parent=root)))
    return "\n\n".join(parts)


def _command(command: click.Command, ctx: click.Context) -> str:
    text = inspect.cleandoc(command.help or "").split("\f")[0]  # as --help cuts it
    lines = [f"## `{ctx.command_path}`", "", "```text", command.get_usage(ctx), "```",
             "", _literal(text.replace("\b\n", ""))]
    # the options as --help lists them (arguments are in the usage line; hidden ones left out)
    records = [r for p in command.get_params(ctx)
               if isinstance(p, click.Option) and (r := p.get_help_record(ctx))]
    if records:
        lines += ["", "| option | what it does |", "| --- | --- |"]
        lines += [f"| `{flags}` | {_literal(' '.join(text.split()))} |"
                  for flags, text in records]
    if command.epilog:  # its exit statuses, as --help ends with them
        lines += ["", "```text", command.epilog.replace("\b\n", ""), "```"]
    return "\n".join(lines)


def _literal(text: str) -> str:
    """Help text as Markdown that shows it as written: code spans (`...`) kept, and outside
    them what Markdown would read as emphasis, a link, HTML or a table cell's end escaped."""
    pieces = re.split(r"(`[^`]*`)", text)
    return "".join(piece if piece.startswith("`") else piece.translate(_ESCAPES)
                   for piece in pieces)


_ESCAPES = str.maketrans({**{c: "\\" + c for c in "\\*_[]|"}, "<": "&lt;"})


def settings_table() -> str:
    return settings.markdown_table()


def field_tables() -> str:
    """The request-field tables of each API, under a heading each. The one place that says
    where they come from: re-point it when the tables move."""
    return (f"## Chat and completions\n\n{fields_table(CHAT_PATH, COMPLETION_PATH)}\n\n"
            f"## Responses API (`/v1/responses`)\n\n{fields_table(RESPONSES_PATH)}\n\n"
            "## Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`)\n\n"
            f"{fields_table(MESSAGES_PATH, COUNT_TOKENS_PATH)}\n\n"
            "## Google's Gemini API\n\n`models/{model}:generateContent` (and "
            "`:streamGenerateContent`), `:countTokens`; each field by its camelCase name, "
            "as the API reads its snake_case spelling too ([Gemini](../gemini.md#how-a-"
            "request-is-matched)).\n\n"
            f"{fields_table(GEMINI_PATH, GEMINI_COUNT_PATH)}")


def tokenizer_fields() -> str:
    """The tokenizer requests' fields (docs/tokenizer.md), from their tables."""
    return markdown_table([("/tokenize (prompt)", TOKENIZE),
                           ("/tokenize (messages)", TOKENIZE_CHAT),
                           ("/detokenize", DETOKENIZE)])


GENERATED: dict[str, Callable[[], str]] = {
    "tokenizer-fields": tokenizer_fields,
    "cli": cli_reference,
    "settings": settings_table,
    "fields": field_tables,
    "base-urls": base_urls.markdown_table,
    "exit-status": exits.markdown_table,
}


def render(markdown: str, where: str) -> str:
    """`markdown` with each marker replaced by what it names; an unknown name is an error."""
    def fill(found: re.Match[str]) -> str:
        if found[1] not in GENERATED:
            raise ValueError(f"{where}: no generated text is called {found[1]!r} "
                             f"(known: {', '.join(GENERATED)})")
        return GENERATED[found[1]]()
    return MARKER.sub(fill, markdown)


# ------------------------------------------------------------------ MkDocs events


def home_page() -> str:
    """The README as the site's home page. It links to pages as `docs/PAGE.md` (from the
    repository's root, as GitHub shows it); as `index.md` it sits beside them."""
    return (ROOT / "README.md").read_text().replace("](docs/", "](")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "index.md", content=home_page()))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    try:
        return render(markdown, page.file.src_uri)
    except ValueError as error:
        raise PluginError(str(error)) from error


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    if found := REMOTE_ASSET.search(output):
        raise PluginError(f"{page.file.src_uri}: loads from another host, which an offline "
                          f"reader cannot: {found[0]}...")
    return output
