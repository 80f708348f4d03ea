"""docker/compose.yaml's `scale` profile and docker/haproxy.cfg (marker `container`).

No Docker engine runs here: the profile is checked as compose reads it (the Compose
Specification's schema checks the whole file: tests/docker/test_container.py), against
the `replay` service it scales out and the balancer's config, which Debian's haproxy
checks for real (`haproxy -c`). tests/parts/test_haproxy.py runs that same config in
front of real replicas.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.parts.haproxy import CONFIG, haproxy_binary

pytestmark = pytest.mark.container
ROOT = Path(__file__).parents[2]
DOCKER = ROOT / "docker"
SCALE = {"replicas", "valkey", "balancer", "scaled-harness"}


def services() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    return found


def directives(name: str) -> list[list[str]]:
    """Every line of haproxy.cfg that starts with `name`, split into words, comments out."""
    lines = (line.split("#")[0].split() for line in CONFIG.read_text().splitlines())
    return [words for words in lines if words[:len(name.split())] == name.split()]


def test_the_default_profile_is_unchanged_and_the_scale_one_is_its_own() -> None:
    found = services()
    assert {name for name, s in found.items() if "profiles" not in s} == {"replay", "harness"}
    assert {name for name, s in found.items() if s.get("profiles") == ["scale"]} == SCALE
    assert set(found) == {"replay", "harness"} | SCALE


def test_the_replicas_are_the_replay_service_sharing_their_state_in_valkey() -> None:
    found = services()
    replay, replicas = found["replay"], found["replicas"]
    for key in ("image", "volumes", "environment", "read_only", "healthcheck"):
        assert replicas[key] == replay[key], key
    assert replicas["pull_policy"] == "never" and "build" not in replicas  # built once
    assert replicas["deploy"]["replicas"] == 3
    assert "ports" not in replicas  # reached through the balancer only
    command = replicas["command"]
    assert command[:2] == ["serve", "/data"]
    assert command[command.index("--state") + 1] == "redis://valkey:6379/0"
    assert replicas["depends_on"] == {"valkey": {"condition": "service_healthy"}}
    valkey = found["valkey"]["command"]
    assert valkey[valkey.index("--save") + 1] == "" and "--appendonly" in valkey
    assert valkey[valkey.index("--maxmemory-policy") + 1] == "noeviction"


def test_the_balancer_serves_its_config_over_the_replicas() -> None:
    found = services()
    balancer = found["balancer"]
    [volume] = balancer["volumes"]
    assert (DOCKER / volume["source"]).resolve() == CONFIG
    assert (volume["target"], volume["read_only"]) == ("/usr/local/etc/haproxy/haproxy.cfg", True)
    [[_, bind]] = directives("bind")
    [published] = balancer["ports"]
    assert published == f"127.0.0.1:8080{bind}"
    [[_, _, slots, address, *_]] = directives("server-template")
    assert address == "replicas:8000"  # the service, on the image's port
    assert int(slots.split("-")[1]) >= found["replicas"]["deploy"]["replicas"]
    assert balancer["depends_on"] == {"replicas": {"condition": "service_healthy"}}
    harness = found["scaled-harness"]
    assert harness["depends_on"] == {"balancer": {"condition": "service_healthy"}}
    assert harness["image"] == found["harness"]["image"]


def test_the_scaled_harness_runs_under_run_whose_verdict_covers_every_replica() -> None:
    """`run RUN --state URL --server BALANCER -- HARNESS`: the harness goes through the
    balancer, and run's exit status counts what every replica answered, on the run they
    serve (the same /data) and the state they share (the same URL)."""
    found = services()
    harness, replica = found["scaled-harness"], found["replicas"]
    [[_, bind]] = directives("bind")
    command = harness["command"]
    assert "entrypoint" not in harness  # (the image's: replay-server)
    assert command[:2] == ["run", replica["command"][1]]
    state = replica["command"][replica["command"].index("--state") + 1]
    assert command[command.index("--state") + 1] == state
    assert command[command.index("--server") + 1] == f"http://balancer{bind}"
    assert command[command.index("--") + 1:] == found["harness"]["entrypoint"]
    assert harness["volumes"] == [*replica["volumes"], *found["harness"]["volumes"]]
    assert harness["environment"] == replica["environment"]


def test_the_images_are_pinned_and_valkey_is_kubernetes_own() -> None:
    found = services()
    for name in ("valkey", "balancer"):
        image, _, tag = found[name]["image"].partition(":")
        assert re.fullmatch(r"\d+\.\d+\.\d+", tag), found[name]["image"]
    manifest = (DOCKER / "kubernetes/base/valkey.yaml").read_text()
    assert f"image: {found['valkey']['image']}\n" in manifest


def test_retries_only_what_no_replica_saw_on_another_replica() -> None:
    """A request is resent only when its connection failed (conn-failure): never one a
    replica may have answered from a saved sample (empty-response, response-timeout, a
    status), which would get the next sample."""
    assert directives("retry-on") == [["retry-on", "conn-failure"]]
    assert directives("option redispatch") == [["option", "redispatch", "1"]]
    assert directives("balance") == [["balance", "roundrobin"]]
    assert directives("http-check send") == [["http-check", "send", "meth", "GET", "uri",
                                              "/health"]]
    assert directives("default-server")[0][1] == "check"


def test_haproxy_checks_the_config(tmp_path: Path) -> None:
    binary = haproxy_binary()
    done = subprocess.run([binary, "-c", "-f", str(CONFIG)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "haproxy.cfg"
    broken.write_text(CONFIG.read_text().replace("retry-on conn-failure", "retry-on conn-fail"))
    done = subprocess.run([binary, "-c", "-f", str(broken)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode != 0 and "conn-fail" in done.stdout + done.stderr  # it has teeth
