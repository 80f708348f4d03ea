"""What a newcomer reads first: `make`'s list of targets, and the documentation site's
generated reference (`make docs`, which `make check` runs, builds the site strictly)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import click
import pytest

from replay_server.cli import main
from replay_server.settings import markdown_table
from tests.docker.test_container import TOOLS
from tests.support import ROOT, docs_hook, docs_page


def test_the_cli_reference_has_every_command_and_option_with_its_help() -> None:
    page = docs_hook().cli_reference()
    for name, command in main.commands.items():
        assert f"## `replay-server {name}`" in page
        section = page.split(f"## `replay-server {name}`", 1)[1].split("\n## ", 1)[0]
        assert f"Usage: replay-server {name} [OPTIONS]" in section
        for option in command.params:
            if isinstance(option, click.Option) and not option.hidden:
                row = next(line for line in section.splitlines()
                           if line.startswith(f"| `{', '.join(option.opts)}"))
                words = re.sub(r"[\\`]", "", row)
                assert " ".join((option.help or "").split()).replace("`", "") in words, row
                if option.envvar:
                    assert f"env var: {option.envvar}" in words
    assert "--require-all" not in page  # hidden from --help, hidden here


def test_the_generated_pages_are_the_code_s_tables_and_an_unknown_name_fails() -> None:
    reference = docs_hook()
    page = (ROOT / "docs/reference/settings.md").read_text()
    assert markdown_table() in reference.render(page, "settings.md")
    assert "<!-- generated:" not in reference.render(
        (ROOT / "docs/reference/fields.md").read_text(), "fields.md")
    try:
        reference.render("<!-- generated: nonsense -->\n", "x.md")
    except ValueError as error:
        assert "x.md: no generated text is called 'nonsense'" in str(error)
    else:
        raise AssertionError("an unknown name was rendered")


def test_plain_make_lists_every_target_and_makes_nothing(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    done = subprocess.run(["make", "-s", "-C", str(ROOT), f"VENV={venv}"], capture_output=True,
                          text=True, check=True)
    assert done.stdout == subprocess.run(["make", "-s", "-C", str(ROOT), "help"],
                                         capture_output=True, text=True, check=True).stdout
    listed = re.findall(r"^  (\w+) +\S", done.stdout, re.M)
    [phony] = re.findall(r"^\.PHONY: (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert sorted(listed) == sorted(phony.split())
    assert not venv.exists()


def test_the_set_up_section_says_what_make_test_installs() -> None:
    """Every apt package the container test installs as root, and every package of the
    harness and container extras, is named in the README's Set up."""
    readme = (ROOT / "README.md").read_text()
    set_up = readme.split("## Set up\n", 1)[1].split("\n## ", 1)[0].replace("_", "-")
    assert all(f" {package}" in set_up for package in TOOLS.values())
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for requirement in extras["harness"] + extras["container"]:
        name = re.match(r"[\w.-]+", requirement)
        assert name and name[0].replace("_", "-") in set_up, requirement


def test_every_module_the_design_page_names_exists() -> None:
    """docs/design.md names modules by their path in the package (`wire/keys.py`) and
    folders (`web/`): each one must be there."""
    page = (ROOT / "docs/design.md").read_text()
    named = set(re.findall(r"`((?:\w+/)*\w+\.py|\w+/(?:\w+/)*)`", page))
    assert len(named) > 40
    missing = sorted(n for n in named if not (ROOT / "replay_server" / n).exists()
                     and not (ROOT / n).exists())  # tests/test_layers.py is the repo's
    assert not missing, missing


def test_the_readme_is_a_landing_page_that_says_how_to_install() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "`pipx install .`" in readme and "`pip install .`" in readme
    assert "make serve" in readme and "make test" in readme


def test_the_site_s_home_page_is_the_readme_linking_beside_the_pages() -> None:
    """The README links to pages as GitHub shows them (`docs/run.md`); as the site's home
    page it sits beside them (`run.md`), where a strict build finds every one."""
    readme, home = (ROOT / "README.md").read_text(), docs_page("index.md")
    assert "](docs/run.md)" in readme and "](docs/" not in home
    assert home == readme.replace("](docs/", "](")
    linked = re.findall(r"\]\(docs/([^)#]+)", readme)
    assert linked and all((ROOT / "docs" / page).is_file() for page in linked), linked


class _Links(HTMLParser):
    """Every href and src of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [value for name, value in attrs if name in ("href", "src") and value]


@pytest.mark.slow
def test_the_built_site_works_opened_from_disk(tmp_path: Path) -> None:
    """Opened as file://, a link to a folder (`run/`) shows the folder, not its page: every
    link between pages goes to a file on disk, and each generated page is there."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(site)],
                   cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    # (404.html links from the site's root: a server shows it at any path, never the disk)
    pages = sorted(set(site.rglob("*.html")) - {site / "404.html"})
    checked = 0
    for page in pages:
        parser = _Links()
        parser.feed(page.read_text())
        for link in parser.links:
            target = urlsplit(link)
            if target.scheme or target.netloc or not target.path:
                continue  # another host (never an asset: the hook checks), or this page
            path = (page.parent / unquote(target.path)).resolve()
            assert path.is_file(), f"{page.relative_to(site)}: {link} is not a file on disk"
            checked += 1
    assert checked > 1000
    reference = (site / "reference/cli.html").read_text()
    assert "replay-server compare" in reference and "Exit status" in reference
    assert (site / "run.html").is_file() and "OPENAI_BASE_URL" in (site / "run.html").read_text()
