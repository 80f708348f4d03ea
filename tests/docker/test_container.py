"""The container image and compose file, built and run for real (marker `container`).

No Docker engine runs here, so Debian's podman builds docker/Dockerfile with the
`docker build` command of docs/container.md, on a Debian base image made with debootstrap
(cached under ~/.cache/replay-server, so only the first run on a machine pays for it). The
image then runs as `docker run` and compose run it, minus the engine: its own entrypoint, command,
user, working directory and environment, on its own filesystem (`podman image mount`,
behind a throwaway overlay), in a private mount and network namespace (`unshare`), with the
saved run bind-mounted read-only at /data. What the docs show is what runs here: the
commands below are docs/container.md's, and the last test checks that the page still says them.

Needs root and podman, debootstrap, iproute2, curl and jq; installs them with apt-get when
missing, once apt's locks are free (`tests/docker/apt.py`: a fresh machine's automatic
updates hold them in its first minutes; past 10 minutes the test fails, naming the holder).
Skips only where they cannot be had (not root, no apt-get), and never in CI.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from replay_server.settings import SETTINGS, envvar
from tests.docker.apt import LockHeld, apt_get

# one worker runs this module (make test: --dist loadgroup), so its fixtures are made once
pytestmark = [pytest.mark.container, pytest.mark.xdist_group("container")]
ROOT = Path(__file__).parents[2]
DOCKER = ROOT / "docker"

# docs/container.md, command for command.
BUILD = "docker build -f docker/Dockerfile -t replay-server ."
RUN = 'docker run --rm -p 127.0.0.1:8000:8000 -v "$PWD/examples:/data:ro" replay-server'
CURL = """\
curl -s http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' -d '{
  "model": "demo/tiny-chat-model",
  "messages": [{"role": "system", "content": "Answer with a number only."},
               {"role": "user", "content": "What is 2+2?"}]}'"""
COMPOSE_BUILD = "docker compose -f docker/compose.yaml build"
COMPOSE_RUN = "docker compose -f docker/compose.yaml run --rm harness"
CHECK = """\
curl -fsS http://127.0.0.1:8000/replay/misses > misses.json
jq -r '.misses[] | "\\(.code): \\(.message)"' misses.json
jq -e '.misses == []' misses.json"""

# What podman needs to build as `docker build` does: no container runtime (chroot), the
# host's network and CA certificates for pip, Docker's image format (it keeps HEALTHCHECK),
# no registry (the base is local), and the ignore file Docker finds by itself.
PODMAN_BUILD = ["podman", "build", "--isolation=chroot", "--network=host",
                "--volume=/etc/ssl/certs:/etc/ssl/certs:ro", "--format=docker",
                "--pull=never", "--ignorefile=docker/Dockerfile.dockerignore"]
TOOLS = {"podman": "podman", "debootstrap": "debootstrap", "ip": "iproute2", "curl": "curl",
         "jq": "jq"}
# The stand-in for python:3.11-slim: Debian bookworm's Python 3.11, with venv.
BASE = {"suite": "bookworm", "mirror": "http://deb.debian.org/debian",
        "include": "python3,python3-venv", "trim": ["var/cache/apt/archives", "var/lib/apt/lists",
                                                   "usr/share/doc", "usr/share/man",
                                                   "usr/share/locale"],
        "changes": ["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "ENV LANG=C.UTF-8", 'CMD ["python3"]']}
NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"  # util-linux, on every Debian
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "replay-server"

# Run inside `unshare` as root: the container's filesystem, then its process (exec'd).
ENTER = r"""
import json, os, subprocess, sys
spec = json.loads(sys.argv[1])
def mount(*args): subprocess.run(["mount", *args], check=True)
if spec["lo_up"]:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
root, top = spec["top"] + "/root", spec["top"]
mount("-t", "overlay", "overlay", "-o", f"lowerdir={spec['image']},upperdir={top}/upper,"
      f"workdir={top}/work", root)
mount("-t", "proc", "proc", root + "/proc")
mount("--bind", "/dev", root + "/dev")
for path, text in spec["files"].items():
    with open(root + path, "w") as f:
        f.write(text)
for source, target, read_only in spec["binds"]:
    if os.path.isdir(source):
        os.makedirs(root + target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(root + target), exist_ok=True)
        open(root + target, "a").close()
    mount("--bind", *(["-o", "ro"] if read_only else []), source, root + target)
if spec["read_only"]:
    mount("-o", "remount,ro", root)
os.chroot(root)
os.chdir(spec["workdir"])
os.setgroups([])
os.setgid(spec["gid"])
os.setuid(spec["uid"])
os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
"""


def sh(*argv: str, timeout: float = 600, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def ok(*argv: str, timeout: float = 600, **kw: Any) -> str:
    done = sh(*argv, timeout=timeout, **kw)
    assert done.returncode == 0, f"{shlex.join(argv)}: {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout


# ------------------------------------------------------------------ tools, base, image


@pytest.fixture(scope="module")
def tools() -> None:
    why = "needs root" if os.geteuid() != 0 else None
    missing = sorted({pkg for cmd, pkg in TOOLS.items() if not shutil.which(cmd)})
    if not why and missing and not shutil.which("apt-get"):
        why = f"needs {', '.join(missing)} and has no apt-get to install them"
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the container test {why}")
        pytest.skip(f"the container test {why}")
    if missing:
        try:
            apt_get("update", "-qq")
            apt_get("install", "-y", "-qq", *missing)
        except LockHeld as error:
            pytest.fail(f"the container test's tools: {error}")


def base_image() -> str:
    """A local Debian base image with Python 3.11 (the test's python:3.11-slim), made once
    per machine and recipe: the debootstrapped root is kept as a tar under CACHE."""
    key = hashlib.sha256(json.dumps(BASE, sort_keys=True).encode()).hexdigest()[:12]
    tag = f"localhost/replay-server-test-base:{BASE['suite']}-{key}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "base.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if sh("podman", "image", "exists", tag).returncode == 0:
            return tag
        tar = CACHE / f"base-{BASE['suite']}-{key}.tar"
        if not tar.exists():
            rootfs = CACHE / "rootfs.tmp"
            shutil.rmtree(rootfs, ignore_errors=True)
            ok("debootstrap", "--variant=minbase", f"--include={BASE['include']}",
               str(BASE["suite"]), str(rootfs), str(BASE["mirror"]))
            for path in BASE["trim"]:
                shutil.rmtree(rootfs / path, ignore_errors=True)
            (rootfs / "etc/resolv.conf").write_text("")  # the engine provides its own
            ok("tar", "--numeric-owner", "-C", str(rootfs), "-cf", f"{tar}.tmp", ".")
            os.replace(f"{tar}.tmp", tar)
            shutil.rmtree(rootfs)
        changes = [arg for change in BASE["changes"] for arg in ("--change", change)]
        ok("podman", "import", *changes, str(tar), tag)
        return tag


@dataclass
class Image:
    name: str
    rootfs: str  # the image's own filesystem, read-only
    config: dict[str, Any]
    healthcheck: list[str]
    added: int  # bytes on top of the base image

    @property
    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.config["Env"])

    @property
    def ids(self) -> tuple[int, int]:
        uid, gid = self.config["User"].split(":")
        return int(uid), int(gid)


@pytest.fixture(scope="module")
def image(tools: None) -> Iterator[Image]:
    """docs/container.md's `docker build`, done by podman on the local base; replaces (and removes)
    the image a previous run built, so that repeated runs do not fill the disk. The image
    is the machine's, as podman's store is: held under a lock while this module uses it,
    so that a test run of another checkout never rebuilds or removes it meanwhile."""
    argv = shlex.split(BUILD)
    assert argv[:2] == ["docker", "build"]
    name = argv[argv.index("-t") + 1]
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = sh("podman", "image", "inspect", "--format", "{{.Id}}", name).stdout.strip()
        base = base_image()
        ok(*PODMAN_BUILD, f"--build-arg=BASE_IMAGE={base}", *argv[2:], cwd=ROOT)
        [info, base_info] = json.loads(ok("podman", "image", "inspect", name, base))
        if before and before != info["Id"]:
            sh("podman", "image", "unmount", "--force", before)
            sh("podman", "rmi", before)
        rootfs = ok("podman", "image", "mount", info["Id"]).strip()
        try:
            yield Image(name, rootfs, info["Config"], info["Healthcheck"]["Test"],
                        info["Size"] - base_info["Size"])
        finally:
            sh("podman", "image", "unmount", info["Id"])


# ------------------------------------------------------------------ running it


def container(image: Image, argv: list[str], *, top: Path, env: dict[str, str] | None = None,
              binds: Sequence[tuple[str, str, bool]] = (), files: dict[str, str] | None = None,
              read_only: bool = False, net: int | None = None) -> list[str]:
    """The command that runs `argv` as a container of `image`: its own network namespace,
    or (net=PID) that of a running container, as compose services share a network."""
    for part in ("upper", "work", "root"):
        (top / part).mkdir(parents=True, exist_ok=True)
    uid, gid = image.ids
    bound = {target for _, target, _ in binds}
    for target in image.config.get("Volumes") or {}:  # an engine's anonymous volume:
        if target not in bound:  # writable under a read-only root, owned as in the image
            volume = top / "volumes" / target.strip("/").replace("/", "-")
            volume.mkdir(parents=True, exist_ok=True)
            owner = os.stat(image.rootfs + target)
            os.chown(volume, owner.st_uid, owner.st_gid)
            binds = [*binds, (str(volume), target, False)]
    spec = {"image": image.rootfs, "top": str(top), "lo_up": net is None, "files": files or {},
            "binds": list(binds), "read_only": read_only, "workdir": image.config["WorkingDir"],
            "uid": uid, "gid": gid, "argv": argv, "env": {**image.env, **(env or {})}}
    unshare = ["unshare", "--mount", "--propagation=private", *(["--net"] if net is None else [])]
    join = [] if net is None else [NSENTER, f"--net=/proc/{net}/ns/net", "--"]
    return [*join, *unshare, "--", sys.executable, "-c", ENTER, json.dumps(spec)]


@dataclass
class Server:
    pid: int
    image: Image
    log: Path

    def exec(self, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
        """`docker exec`: argv in the running container, as its user, with its env."""
        uid, gid = self.image.ids
        return sh(NSENTER, f"--target={self.pid}", "--mount", "--net", "--root", "--wd",
                  f"--setuid={uid}", f"--setgid={gid}", "--", *argv, timeout=30,
                  env={**self.image.env, **env})

    def host(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        """argv on this machine, reaching the container as the host reaches its published
        port (the container's own network here, where its port is the published one)."""
        return sh(NSENTER, f"--net=/proc/{self.pid}/ns/net", "--", *argv, timeout=120, **kw)

    def healthy(self) -> bool:
        return self.exec(self.image.healthcheck[1:]).returncode == 0


@pytest.fixture(scope="module")
def server(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """docs/container.md's `docker run`: the image's entrypoint and command on the example run
    (read-only at /data), with a read-only root as compose runs it; healthy within the
    image's start period; stopped with SIGTERM as `docker stop` does."""
    argv = shlex.split(RUN.replace("$PWD", str(ROOT)))
    assert argv[:2] == ["docker", "run"] and argv[-1] == image.name
    source, target, mode = argv[argv.index("-v") + 1].split(":")
    published = argv[argv.index("-p") + 1].split(":")
    assert published[1] == published[2] == image.env["REPLAY_SERVER_PORT"]
    top = tmp_path_factory.mktemp("replay")
    log = top / "server.log"
    command = image.config["Entrypoint"] + image.config["Cmd"]
    with log.open("w") as out:
        proc = subprocess.Popen(container(image, command, top=top, read_only=True,
                                          binds=[(source, target, mode == "ro")]),
                                stdout=out, stderr=subprocess.STDOUT)
    running = Server(proc.pid, image, log)
    try:
        deadline = time.monotonic() + 60
        while not running.healthy():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield running
    finally:
        proc.send_signal(signal.SIGTERM)  # uvicorn drains, then exits by the same signal
        code = proc.wait(30)
    assert code in (0, -signal.SIGTERM), log.read_text()
    assert "Application shutdown complete" in log.read_text()


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DOCKER / "compose.yaml").read_text()))


def serve_envvars() -> set[str]:
    """The environment variables `replay-server serve --help` names, one per option."""
    help_text = ok(sys.executable, "-m", "replay_server", "serve", "--help")
    return set(re.findall(r"env\s+var:\s+(REPLAY_SERVER_[A-Z_]+)", help_text))


# ------------------------------------------------------------------ the tests


def test_the_image_serves_data_on_port_8000_as_a_non_root_user(image: Image) -> None:
    assert image.config["Entrypoint"] + image.config["Cmd"] == ["replay-server", "serve", "/data"]
    assert image.config["WorkingDir"] == "/data"
    assert image.ids[0] != 0 and image.ids[1] != 0
    assert image.env["REPLAY_SERVER_HOST"] == "0.0.0.0"
    assert set(image.config["ExposedPorts"]) == {image.env["REPLAY_SERVER_PORT"] + "/tcp"}
    # the healthcheck needs Python only, no curl
    assert image.healthcheck[:2] == ["CMD", "python3"] and "urllib" in image.healthcheck[-1]
    assert not Path(image.rootfs, "usr/bin/curl").exists()
    # a virtual environment (the dependencies and the tokens, state and objects extras,
    # ~155 MB), nothing else
    assert image.added < 170e6
    assert not Path(image.rootfs, "opt/replay-server/bin/pip").exists()


def test_every_serve_option_is_an_environment_variable_in_the_image(
        image: Image, tmp_path: Path) -> None:
    argv = container(image, [*image.config["Entrypoint"], "serve", "--help"], top=tmp_path)
    shown = set(re.findall(r"env\s+var:\s+(REPLAY_SERVER_[A-Z_]+)", ok(*argv)))
    assert shown == {envvar(s.name) for s in SETTINGS} == serve_envvars()


def test_the_image_reads_token_id_runs_with_a_tokenizer(image: Image, tmp_path: Path) -> None:
    """The image holds the `tokens` extra: --tokenizer works there as on the host."""
    data = ROOT / "tests/data/lm_eval/mc_tokenized"
    tokenizer = ROOT / "tests/data/gen/tokenizer_bpe"
    argv = [*image.config["Entrypoint"], "inspect", "/data", "--tokenizer", "/tokenizer"]
    out = ok(*container(image, argv, top=tmp_path, read_only=True,
                        binds=[(str(data), "/data", True), (str(tokenizer), "/tokenizer", True)]))
    host = ok(sys.executable, "-m", "replay_server", "inspect", str(data),
              "--tokenizer", str(tokenizer))
    counts = re.compile(r"model \S+: \d+ records, \d+ prompts.*")
    assert counts.findall(out) == counts.findall(host) != []
    assert "skipped" not in out


def test_the_image_holds_the_state_and_objects_extras(image: Image, tmp_path: Path) -> None:
    """What compose's `scale` profile and the Kubernetes manifests run: `--state` reaches
    for its store (none listens here: the error is the store's, not a missing package),
    and an s3:// URL is read through fsspec (none answers: the error names the URL)."""
    argv = [*image.config["Entrypoint"], "serve", "/data", "--state", "redis://127.0.0.1:9/0"]
    done = sh(*container(image, argv, top=tmp_path / "state", read_only=True,
                         binds=[(str(ROOT / "examples"), "/data", True)]))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot reach redis://127.0.0.1:9/0" in done.stderr and "pip install" not in \
        done.stderr, done.stderr
    argv = [*image.config["Entrypoint"], "inspect", "s3://bucket/run/"]
    done = sh(*container(image, argv, top=tmp_path / "objects", read_only=True,
                         env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9",
                              "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                              "AWS_MAX_ATTEMPTS": "1"}))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "s3://bucket/run/" in done.stderr and "pip install" not in done.stderr, \
        done.stderr


def test_health_replay_and_miss(server: Server) -> None:
    health = server.host(["curl", "-s", "-w", "%{http_code}", "http://127.0.0.1:8000/health"])
    assert health.stdout == "200"
    assert json.loads(server.host(["bash", "-c", CURL]).stdout)["choices"][0]["message"] == {
        "role": "assistant", "content": "4", "refusal": None, "annotations": None,
        "audio": None, "function_call": None, "tool_calls": [], "reasoning": "2 plus 2 makes 4."}
    client = r"""
import json, openai
client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="replay", max_retries=0)
ask = lambda q: client.chat.completions.create(model="demo/tiny-chat-model", messages=[
    {"role": "system", "content": "Answer with a number only."}, {"role": "user", "content": q}])
r = ask("What is 2+2?")
out = {"answer": r.choices[0].message.content, "usage": r.usage.completion_tokens}
try:
    ask("What is 2+3?")
except openai.BadRequestError as e:
    out["miss"] = [e.status_code, e.response.json()["error"]["code"],
                   e.response.headers["x-should-retry"]]
print(json.dumps(out))
"""
    done = server.host([sys.executable, "-c", client])
    assert json.loads(done.stdout) == {
        "answer": "4", "usage": 9, "miss": [400, "replay_no_match", "false"]}, done.stderr


def test_the_healthcheck_fails_when_nothing_answers(server: Server) -> None:
    assert server.healthy()
    assert server.exec(server.image.healthcheck[1:], REPLAY_SERVER_PORT="1").returncode != 0


def test_compose_file_follows_the_compose_specification(tmp_path: Path) -> None:
    check = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    ok(*check, str(DOCKER / "compose.yaml"))
    broken = compose()
    broken["services"]["harness"]["depends_on"]["replay"]["condition"] = "healthy"
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(broken))
    assert sh(*check, str(tmp_path / "compose.yaml")).returncode == 1  # the schema has teeth


def test_the_served_run_is_indexed_into_the_image_s_cache_volume(server: Server) -> None:
    """Under a read-only root the saved files' index goes to the image's /cache volume
    (REPLAY_SERVER_CACHE), where a named volume keeps it for the next container."""
    done = server.exec(["replay-server", "cache"])
    assert done.returncode == 0, done.stderr
    said = done.stdout
    assert said.startswith("replay-server's cache: /cache\n"), said
    assert "indexes (/cache/indexes): 1," in said and "from /data" in said


def test_compose_runs_the_image_as_the_docs_do(image: Image) -> None:
    replay, harness = (compose()["services"][name] for name in ("replay", "harness"))
    build = shlex.split(BUILD)
    assert (DOCKER / replay["build"]["context"]).resolve() == ROOT  # `.`, from the root
    assert replay["build"]["dockerfile"] == build[build.index("-f") + 1]
    assert replay["image"] == harness["image"] == build[build.index("-t") + 1] == image.name
    assert "command" not in replay and "entrypoint" not in replay  # the image's own
    run = shlex.split(RUN)
    assert replay["ports"] == [run[run.index("-p") + 1]]
    [volume, cache] = replay["volumes"]
    default = re.fullmatch(r"\$\{REPLAY_RUN:-(.+)\}", volume["source"])
    assert default and (DOCKER / default[1]).resolve() == ROOT / "examples"
    assert (volume["type"], volume["target"], volume["read_only"]) == ("bind", "/data", True)
    # the index cache: the image's volume, named so that it is kept between `up`s
    assert cache == {"type": "volume", "source": "index-cache",
                     "target": image.env["REPLAY_SERVER_CACHE"]}
    assert cache["target"] in image.config["Volumes"] and cache["source"] in compose()["volumes"]
    assert image.config["Cmd"][-1] == "/data"
    assert replay["healthcheck"]["test"] == image.healthcheck
    assert set(replay["environment"]) == serve_envvars() - {
        "REPLAY_SERVER_HOST", "REPLAY_SERVER_PORT"}  # every option but the image's address
    port = image.env["REPLAY_SERVER_PORT"]
    assert harness["depends_on"] == {"replay": {"condition": "service_healthy"}}
    assert harness["environment"]["OPENAI_BASE_URL"] == f"http://replay:{port}/v1"


def test_the_compose_harness_rescores_and_the_ci_check_fails_on_a_miss(
        server: Server, tmp_path: Path) -> None:
    reset = server.host(["curl", "-fsS", "-X", "POST", "http://127.0.0.1:8000/replay/reset"])
    assert reset.returncode == 0, reset.stderr
    harness = compose()["services"]["harness"]
    binds = [(str((DOCKER / v["source"]).resolve()), v["target"], v["read_only"])
             for v in harness["volumes"]]
    env = {k: re.sub(r"\$\{\w+:-(.*)\}", r"\1", v) for k, v in harness["environment"].items()}
    argv = container(server.image, harness["entrypoint"] + harness.get("command", []),
                     top=tmp_path / "harness", env=env, binds=binds, net=server.pid,
                     files={"/etc/hosts": "127.0.0.1 localhost replay\n"})  # compose's DNS
    assert shlex.split(COMPOSE_RUN)[-1] == "harness"
    done = sh(*argv, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "accuracy: 3/3"
    check = server.host(["bash", "-e", "-c", CHECK], cwd=tmp_path)
    assert check.returncode == 0 and check.stdout == "true\n", check.stderr
    server.host(["bash", "-c", CURL.replace("2+2", "2+3")])
    check = server.host(["bash", "-e", "-c", CHECK], cwd=tmp_path)
    assert check.returncode == 1 and check.stdout.startswith("replay_no_match: no saved gen")


def test_the_container_page_is_what_this_test_runs(tmp_path: Path) -> None:
    section = (ROOT / "docs/container.md").read_text()
    for command in (BUILD, RUN, CURL, COMPOSE_RUN):
        assert command in section, command
    [workflow] = re.findall(r"```yaml\n(.*?)```", section, re.S)
    (tmp_path / "rescore.yml").write_text(workflow)
    ok(sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
       str(tmp_path / "rescore.yml"))
    [job] = yaml.safe_load(workflow)["jobs"].values()
    assert "REPLAY_RUN" in job["env"]  # the saved run that compose mounts
    runs = [step["run"].strip() for step in job["steps"] if "run" in step]
    assert runs[:3] == [COMPOSE_BUILD, COMPOSE_RUN, CHECK]
