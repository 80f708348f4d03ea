"""The command line as users run it: a real `replay-server` process, the README and the docs."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

from replay_server import errors
from replay_server.cli import main
from replay_server.commands.serve import open_run, snippet_lines
from replay_server.settings import SETTINGS, Settings, flag, markdown_table
from tests.support import CLI, ROOT, Spawned, docs_page, spawn, wait_for

README = (ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def example() -> Iterator[Spawned]:
    with spawn("serve", "examples/") as server:
        yield server
        assert server.stop() == 0


def printed_snippet(server: Spawned) -> str:
    """The commands `serve` printed under its ready line, as printed."""
    wait_for(lambda: "Application startup complete" in server.output)  # printed before it
    after = server.output.split(f"ready on {server.url}\n", 1)[1]
    return "\n".join(itertools.takewhile(lambda line: line.startswith("  "),
                                         after.splitlines()))


def json_and_text(out: str) -> list[Any]:
    """Output of commands run one after another: each JSON body (curl ends none with a
    newline) and each run of other text, stripped, in order."""
    pieces: list[Any] = []
    at = 0
    while at < len(out):
        if out[at] == "{":
            body, at = json.JSONDecoder().raw_decode(out, at)
            pieces.append(body)
        else:
            end = out.find("{", at)
            end = len(out) if end < 0 else end
            if text := out[at:end].strip():
                pieces.append(text)
            at = end
    return pieces


@pytest.mark.slow
@pytest.mark.http
def test_serve_prints_lines_that_run_as_pasted_in_another_shell(
        example: Spawned, tmp_path: Path) -> None:
    """Exactly the printed lines, in a fresh shell elsewhere, as on a stock Debian machine:
    Debian's PATH (python3 but no `python`, no venv), no OPENAI_ variables. The Python line
    names the server's interpreter, which has openai here as in `make serve`'s venv."""
    snippet = printed_snippet(example)
    assert f"export OPENAI_BASE_URL={example.url} " in snippet.splitlines()[-1]
    assert f"{sys.executable} -c " in snippet  # the server's, named: it has openai
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    assert shutil.which("python", path=env["PATH"]) is None
    done = subprocess.run(["bash"], input=snippet, env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr, done.stderr
    chat, printed, completion = json_and_text(done.stdout)
    assert chat["choices"][0]["message"]["content"] == printed == "4"
    assert completion["choices"][0]["text"] == " Paris."


def test_without_openai_the_python_line_installs_it_in_a_venv_first() -> None:
    """Where the server's interpreter lacks openai (a `pip install .` without the client
    extra), the Python line runs from a venv that the line before it makes."""
    opened = open_run([ROOT / "examples"], Settings())
    lines = [line.strip() for line in snippet_lines(opened, "http://127.0.0.1:9/v1", None)]
    at = next(i for i, line in enumerate(lines) if " -m venv " in line)
    make, install = lines[at].split(" && ")
    assert shlex.split(make)[:3] == [sys.executable, "-m", "venv"]
    venv = make.split()[-1]
    assert install == f"{venv}/bin/pip install -q openai"
    assert lines[at + 1].startswith(f"{venv}/bin/python -c ")
    code = shlex.split(lines[at + 1])[2]
    assert 'OpenAI(base_url="http://127.0.0.1:9/v1", api_key="replay")' in code


@pytest.mark.slow
@pytest.mark.http
def test_the_readme_quick_start_runs_as_written(example: Spawned) -> None:
    code = README.split("```python\n", 1)[1].split("```", 1)[0]
    assert 'base_url="http://127.0.0.1:8000/v1", api_key="replay"' in code  # make serve's
    code = code.replace("http://127.0.0.1:8000/v1", example.url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines() == ["4", "2 plus 2 makes 4.", "9"]


@pytest.mark.http
def test_the_readme_miss_example_is_what_the_server_says(example: Spawned) -> None:
    with openai.OpenAI(base_url=example.url, api_key="x") as client, \
            pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="demo/tiny-chat-model", messages=[
            {"role": "system", "content": "Answer with a number only."},
            {"role": "user", "content": "What is 2+3?"}])
    shown = README.split("openai.BadRequestError: Error code: 400 - ", 1)[1]
    shown = " ".join(shown.split("...", 1)[0].split())
    assert str(e.value).startswith("Error code: 400 - " + shown)


def test_a_bad_saved_file_stops_start_up_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"replay_record": 1, "endpoint": "/v1/chat/completions"}\n')
    result = subprocess.run([*CLI, "serve", str(path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"error: {path}:1: field `model`: missing" in result.stderr


def test_every_setting_has_help_a_flag_and_a_row_in_the_docs() -> None:
    assert markdown_table() in docs_page("reference/settings.md")
    help_text = subprocess.run([*CLI, "serve", "--help"], capture_output=True, text=True,
                               check=True).stdout
    for setting in SETTINGS:
        assert setting.metadata["help"]
        assert flag(setting.name) in help_text


def test_the_errors_page_lists_every_replay_error_code() -> None:
    codes = [c.code for c in vars(errors).values()
             if isinstance(c, type) and issubclass(c, errors.ReplayError)
             and c is not errors.ReplayError]
    page = docs_page("errors.md")
    assert codes and all(f"`{code}`" in page for code in codes)


@pytest.mark.slow
@pytest.mark.parametrize("command", [["--help"], ["--version"], ["inspect", "examples/"],
                                     ["convert", "examples/", "-o", "{tmp}/run.jsonl"],
                                     ["index", "examples/", "-o", "{tmp}/run.idx"]])
def test_commands_that_serve_nothing_start_without_the_web_stack(tmp_path: Path,
                                                                 command: list[str]) -> None:
    argv = [arg.format(tmp=tmp_path) for arg in command]
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "replay_server", *argv],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    imported = re.findall(r"^import time:.*\|\s*([\w.]+)$", done.stderr, re.M)
    assert "replay_server.cli" in imported
    assert not {m.split(".")[0] for m in imported} & {"fastapi", "starlette", "uvicorn", "httpx"}


# Each command's output option, in a command line that would run for good if the output
# were accepted (`{out}`: the path; `{ran}`: a file COMMAND creates, were it ever run).
UPSTREAM = ["--upstream", "http://127.0.0.1:9/v1"]  # never reached: nothing listens there
RAN = [sys.executable, "-c", "open({ran!r}, 'w')"]
SCORED = "tests/data/lm_eval/chat_repeats"
OUTPUTS = {
    "record --out": ["record", *UPSTREAM, "--port", "0", "--out", "{out}"],
    "serve --out": ["serve", "examples/", "--port", "0", *UPSTREAM, "--out", "{out}"],
    "convert -o": ["convert", "examples/", "-o", "{out}"],
    "index -o": ["index", "examples/", "-o", "{out}"],
    "run --report": ["run", "examples/", "--report", "{out}", "--", *RAN],
    "run --out": ["run", "examples/", *UPSTREAM, "--out", "{out}", "--", *RAN],
    "compare --html": ["compare", SCORED, SCORED, "--html", "{out}"],
}
# as root, write permission comes from a capability: the command runs without it
UNPRIVILEGED = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


@pytest.mark.slow
@pytest.mark.parametrize("option", OUTPUTS)
@pytest.mark.parametrize("case", ["no such directory", "a directory", "no permission"])
def test_an_output_that_cannot_be_written_is_one_line_before_any_work(
        tmp_path: Path, option: str, case: str) -> None:
    """A bad output path is a bad option: one line naming the path and why, exit 2, before
    anything is loaded (or COMMAND run), never an errno or a traceback."""
    out = {"no such directory": tmp_path / "missing" / "out.jsonl", "a directory": tmp_path,
           "no permission": tmp_path / "read-only" / "out.jsonl"}[case]
    prefix: list[str] = []
    if case == "no permission":
        out.parent.mkdir(mode=0o555)
        if os.geteuid() == 0:
            if not shutil.which("setpriv"):
                pytest.skip("as root, needs setpriv to run without write permission")
            prefix = UNPRIVILEGED
    ran = tmp_path / "ran"
    argv = [a.format(out=out, ran=str(ran)) for a in OUTPUTS[option]]
    done = subprocess.run([*prefix, *CLI, *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    reason = {"no such directory": f"no such directory: {out.parent}",
              "a directory": "it is a directory: name a file",
              "no permission": f"no permission to write in {out.parent}"}[case]
    flag = option.split()[1]
    assert (done.returncode, done.stderr) == (
        2, f"error: {out}: cannot write the {flag} file: {reason}\n"), done.stderr
    assert not ran.exists() and done.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize("option", OUTPUTS)
@pytest.mark.parametrize("node", ["a pipe", "a device"])
def test_an_output_that_is_no_regular_file_is_refused_and_left_as_it_is(
        tmp_path: Path, option: str, node: str) -> None:
    """A file written whole is renamed over its path: over a pipe or a device (`-o
    /dev/null`, `/dev/stdout`) that would replace the node with a regular file (as root,
    /dev/null itself), and appending to a pipe waits for a reader for ever. Refused in one
    line before any work, the node untouched."""
    out = tmp_path / "node"
    if node == "a pipe":
        os.mkfifo(out)
    elif os.geteuid() == 0:
        os.mknod(out, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null of the test's
    else:
        pytest.skip("making a device node needs root")
    before = os.stat(out)
    ran = tmp_path / "ran"
    argv = [a.format(out=out, ran=str(ran)) for a in OUTPUTS[option]]
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    flag = option.split()[1]
    assert (done.returncode, done.stderr) == (
        2, f"error: {out}: cannot write the {flag} file: it is {node}, not a regular file: "
           "name a file\n"), done.stderr
    after = os.stat(out)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert not ran.exists() and done.stdout == ""


def exit_statuses(command: str) -> list[str]:
    """The exit statuses `command --help` lists, in its order."""
    help_text = CliRunner().invoke(main, [command, "--help"]).stdout
    assert "Exit status, the first that applies:\n" in help_text, help_text
    block = help_text.split("Exit status, the first that applies:\n", 1)[1]
    return re.findall(r"^ +(\d+|COMMAND's own)\b", block, re.M)


def test_every_command_s_help_ends_with_its_exit_statuses() -> None:
    """In one form for every command; the command reference and the errors page are
    generated from the same table."""
    commands = [name for name, c in main.commands.items() if not c.hidden]
    assert commands == ["serve", "inspect", "convert", "record", "index", "cache", "compare",
                        "run"]
    for name in commands:
        statuses = exit_statuses(name)
        assert statuses[-1] == "0" and "2" in statuses, (name, statuses)
    assert exit_statuses("run") == ["2", "3", "6", "COMMAND's own", "5", "4", "0"]
    reference, page = docs_page("reference/cli.md"), docs_page("errors.md")
    for name in commands:
        assert f"## `replay-server {name}`" in reference
        assert f"| `{name}` |" in page


def bad_run(tmp_path: Path) -> Path:
    """A saved run whose second line is not JSON: 1 record, 1 bad line."""
    path = tmp_path / "bad.jsonl"
    path.write_text((ROOT / "examples/demo-run.jsonl").read_text().splitlines()[0] + "\n{\n")
    return path


LM_EVAL = ROOT / "tests/data/lm_eval"
DIFFERENT = [str(next((LM_EVAL / case).glob("*/samples_*.jsonl")).relative_to(ROOT))
             for case in ("completions_batch", "tokenized_gen")]
# (argv, the status it ends with); {bad}: bad_run; {out}: a new file
STATUSES = [
    (["inspect", "examples/"], 0), (["inspect", "{bad}"], 2),
    (["inspect", "{bad}", "--skip-bad-lines"], 1),
    (["convert", "examples/", "-o", "{out}"], 0), (["convert", "{bad}", "-o", "{out}"], 2),
    (["convert", "{bad}", "-o", "{out}", "--skip-bad-lines"], 1),
    (["index", "examples/", "-o", "{out}"], 0), (["index", "{bad}", "-o", "{out}"], 2),
    (["index", "{bad}", "-o", "{out}", "--skip-bad-lines"], 1),
    (["compare", SCORED, SCORED], 0), (["compare", *DIFFERENT], 1),
    (["compare", SCORED, "{bad}"], 2),
    (["serve", "{bad}"], 2), (["record", *UPSTREAM, "--out", "{bad}/x"], 2),
    (["run", "{bad}", "--", "true"], 2), (["run", "examples/", "--", "true"], 5),
]


@pytest.mark.slow
@pytest.mark.parametrize(("argv", "status"), STATUSES, ids=[" ".join(a) for a, _ in STATUSES])
def test_each_status_a_command_ends_with_is_one_its_help_lists(
        tmp_path: Path, argv: list[str], status: int) -> None:
    """Each command run as users run it, to each of its outcomes (`run`'s others:
    tests/commands/test_run.py; `serve` and `record` end with 0 when stopped)."""
    args = [a.format(bad=bad_run(tmp_path), out=tmp_path / "out") for a in argv]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == status, done.stderr
    assert str(status) in exit_statuses(argv[0])


STOP = "replay-server: Ctrl-C stops the server (SIGINT; SIGTERM too)"


@pytest.mark.slow
def test_make_serve_says_how_to_stop_it_and_stops_on_ctrl_c() -> None:
    """`make serve` as the README runs it (this venv, a free port), stopped as a terminal's
    Ctrl-C stops it: SIGINT to its whole process group, make's and the server's."""
    venv = sys.prefix  # installed: make is told not to install again
    served = Spawned(["make", "-s", "-C", str(ROOT), "serve", "PORT=0", f"VENV={venv}",
                      "-o", f"{venv}/.installed"], ROOT, None)
    try:
        assert served.ready.wait(60) and served.url, served.output
        wait_for(lambda: STOP in served.output)
    finally:
        if served.proc.poll() is None:
            os.killpg(served.proc.pid, signal.SIGINT)
        served.wait()
    after = served.output.split(f"ready on {served.url}\n", 1)[1]
    assert after.index(STOP) > after.index("export OPENAI_BASE_URL")  # after the snippet
    assert "replay-server: stopped" in served.output
    set_up = README.split("## Set up\n", 1)[1].split("\n## ", 1)[0]
    assert "Ctrl-C stops the server" in set_up
