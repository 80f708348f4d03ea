"""The `replay-server` command line: parse, then call one function. No logic here."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import MISSING
from pathlib import Path
from typing import Any, NoReturn

import click
import orjson

from . import inspection, server
from .errors import LoadError
from .loader import load
from .settings import SETTINGS, Settings, envvar, flag

F = Callable[..., Any]


def _say(line: str) -> None:
    click.echo(line, err=True)


def settings_options(command: F) -> F:
    """One click option per Settings field: flag, type, default, help and env variable."""
    for setting in reversed(SETTINGS):
        meta = setting.metadata
        default = setting.default if setting.default is not MISSING else None
        kwargs: dict[str, Any] = {"help": meta["help"], "envvar": envvar(setting.name),
                                  "show_envvar": True}
        if setting.type == "bool":
            kwargs.update(is_flag=True, default=default)
        elif meta.get("multiple"):
            kwargs.update(multiple=True, metavar=meta.get("metavar"))
        else:
            kwargs.update(default=default, show_default=True)
            if "choices" in meta:
                kwargs["type"] = click.Choice(meta["choices"])
            elif setting.type == "int":
                kwargs["type"] = int
        command = click.option(flag(setting.name), setting.name, **kwargs)(command)
    return command


def _fail(error: Exception) -> NoReturn:
    _say(f"error: {error}")
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="replay-server")
def main() -> None:
    """Rescore saved LLM generations with any eval harness: an OpenAI-compatible server
    that answers from saved runs, exactly, and fails loudly on anything it did not save."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@settings_options
def serve(paths: tuple[str, ...], **options: Any) -> None:
    """Serve the saved runs in PATHS (files or directories) over the OpenAI API.

    Reads replay-server records (.jsonl) and OpenAI Batch input + output files. Point any
    harness at it with OPENAI_BASE_URL=http://HOST:PORT/v1.
    """
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, tuple | list) else v
                              for k, v in options.items()}
    settings = Settings(**values)
    logging.basicConfig(level=settings.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server.serve(paths, settings, _say)
    except (LoadError, ValueError, OSError) as error:
        _fail(error)
    except KeyboardInterrupt:
        _say("replay-server: stopped")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--skip-bad-lines", is_flag=True,
              help="Report bad lines instead of stopping at the first one (exit status 1).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def inspect(paths: tuple[str, ...], skip_bad_lines: bool, as_json: bool) -> None:
    """Show what `serve PATHS` would serve, without serving.

    Per source file and model: records loaded, rows skipped and why (with examples),
    ambiguous and unusable prompts, samples per instance. Exits 2 on a bad saved file,
    1 when --skip-bad-lines skipped some lines, else 0.
    """
    try:
        report = inspection.summary(load(paths, skip_bad_lines=skip_bad_lines))
    except LoadError as error:
        _fail(error)
    if as_json:
        click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo("\n".join(inspection.render(report)))
    sys.exit(1 if report["bad_lines"] else 0)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The native JSONL file to write (replaced whole, never half-written).")
@click.option("--skip-bad-lines", is_flag=True,
              help="Leave out lines that cannot be read, and report them, instead of stopping.")
def convert(paths: tuple[str, ...], output: Path, skip_bad_lines: bool) -> None:
    """Write every saved exchange in PATHS as replay-server records (one JSONL file).

    `serve OUTPUT` then answers exactly as `serve PATHS` does.
    """
    try:
        count, ctx = inspection.convert(paths, output, skip_bad_lines=skip_bad_lines)
    except LoadError as error:
        _fail(error)
    _say(f"wrote {count} records to {output}")
    for bad in ctx.bad_lines:
        _say(f"  bad line left out: {bad}")
    sys.exit(1 if ctx.bad_lines else 0)


if __name__ == "__main__":
    main()
