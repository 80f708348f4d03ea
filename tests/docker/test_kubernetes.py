"""The Kubernetes manifests (docker/kubernetes/), checked offline (marker `container`).

Each kustomization is rendered as kustomize renders it (its resources, then its JSON
patches, RFC 6902, applied with `jsonpatch`; a field of a kustomization this rendering does
not know fails the test rather than being ignored), and where kubectl is installed, its
own `kubectl kustomize` must render the same objects. Every object is validated against
Kubernetes' own schemas (kubernetes-validate, strict: an unknown or misspelled field
fails) for one pinned Kubernetes version, then checked for what issue 33 asks of the
deployment: replicas, probes on /health, the state in the Valkey Service, the index
read-only (from a volume, or built by an init container from object storage), images
pinned, non-root, and no secret value written anywhere.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import replay_server

pytestmark = pytest.mark.container
ROOT = Path(__file__).parents[2]
KUBERNETES = ROOT / "docker" / "kubernetes"
BASE, OBJECT_STORAGE = KUBERNETES / "base", KUBERNETES / "object-storage"
VERSION = "1.35.0"  # the Kubernetes whose schemas the manifests follow
# the kustomization fields `render` knows, and of a patch
KNOWN = {"apiVersion", "kind", "resources", "patches"}
PATCH = {"path", "target"}

Object = dict[str, Any]


def documents(path: Path) -> list[Object]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def render(folder: Path) -> list[Object]:
    """The objects `kubectl apply -k FOLDER` applies."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(kustomization) <= KNOWN, f"{folder}: {set(kustomization) - KNOWN} not rendered"
    objects: list[Object] = []
    for resource in kustomization.get("resources", []):
        path = folder / resource
        objects += render(path) if path.is_dir() else documents(path)
    for patch in kustomization.get("patches", []):
        assert set(patch) == PATCH and set(patch["target"]) == {"kind", "name"}, patch
        [target] = [o for o in objects if o["kind"] == patch["target"]["kind"]
                    and o["metadata"]["name"] == patch["target"]["name"]]
        import jsonpatch  # (the container extra's, as below: make check collects this module)

        ops = yaml.safe_load((folder / patch["path"]).read_text())
        patched = jsonpatch.apply_patch(target, ops)
        objects[objects.index(target)] = patched
    return objects


def by_name(objects: list[Object]) -> dict[tuple[str, str], Object]:
    named = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(named) == len(objects), "two objects of one kind share a name"
    return named


def schema_errors(obj: Object) -> str | None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return f"{'.'.join(map(str, error.path))}: {error.message}"
    return None


def pod(objects: list[Object], name: str) -> Object:
    spec: Object = by_name(objects)["Deployment", name]["spec"]["template"]["spec"]
    return spec


def containers(spec: Object) -> list[Object]:
    found: list[Object] = spec["containers"] + spec.get("initContainers", [])
    return found


KUSTOMIZATIONS = [BASE, OBJECT_STORAGE]


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda f: f.name)
def test_every_object_follows_kubernetes_own_schema(folder: Path) -> None:
    named = by_name(render(folder))
    assert {key: schema_errors(o) for key, o in named.items()} == {
        (kind, name): None for kind in ("Deployment", "Service")
        for name in ("replay-server", "valkey")}


def test_the_schemas_have_teeth() -> None:
    """A misspelled field, a wrong type, a missing required field: each fails."""
    deployment = by_name(render(BASE))["Deployment", "replay-server"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    for key, value in (("readinesProbe", container["readinessProbe"]), ("ports", "8000")):
        broken = copy.deepcopy(deployment)
        broken["spec"]["template"]["spec"]["containers"][0][key] = value
        assert schema_errors(broken), key
    broken = copy.deepcopy(deployment)
    del broken["spec"]["selector"]
    assert schema_errors(broken) == "spec: 'selector' is a required property"


def test_the_base_lists_every_manifest_of_its_folder() -> None:
    listed = yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in BASE.glob("*.yaml")
                                    if p.name != "kustomization.yaml")


@pytest.mark.skipif(not shutil.which("kubectl"), reason="kubectl (its kustomize) not installed")
@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda f: f.name)
def test_kubectl_kustomize_renders_the_same_objects(folder: Path) -> None:
    done = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert by_name(list(yaml.safe_load_all(done.stdout))) == by_name(render(folder))


def test_replicas_probe_health_and_share_the_state_in_the_valkey_service() -> None:
    objects = render(BASE)
    named = by_name(objects)
    deployment, service = named["Deployment", "replay-server"], named["Service", "replay-server"]
    assert deployment["spec"]["replicas"] == 3
    [server] = pod(objects, "replay-server")["containers"]
    [port] = server["ports"]
    assert (port["name"], port["containerPort"]) == ("http", 8000)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    args = server["args"]
    assert args[:2] == ["serve", "/index/run.idx"]
    assert args[args.index("--host") + 1] == "0.0.0.0"
    valkey = named["Service", "valkey"]["spec"]["ports"][0]["port"]
    assert args[args.index("--state") + 1] == f"redis://valkey:{valkey}/0"
    assert named["Service", "valkey"]["spec"]["ports"][0]["targetPort"] == "valkey"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http"}]
    for name in ("replay-server", "valkey"):  # each Service selects its Deployment's pods
        labels = named["Deployment", name]["spec"]["template"]["metadata"]["labels"]
        assert named["Service", name]["spec"]["selector"].items() <= labels.items(), name


def test_valkey_keeps_nothing_and_evicts_nothing() -> None:
    [valkey] = pod(render(BASE), "valkey")["containers"]
    args = valkey["args"]
    assert args[args.index("--save") + 1] == "" and args[args.index("--appendonly") + 1] == "no"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert args[args.index("--maxmemory") + 1] == "768mb"
    assert valkey["resources"]["limits"]["memory"] == "1Gi"  # above it


def index_mount(spec: Object) -> tuple[Object, Object]:
    """The server's mount of the folder that holds /index/run.idx, and its volume."""
    [server] = spec["containers"]
    [mount] = [m for m in server["volumeMounts"] if "/index/run.idx".startswith(
        m["mountPath"].rstrip("/") + "/")]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return mount, volume


def test_the_base_reads_the_index_from_a_read_only_volume() -> None:
    spec = pod(render(BASE), "replay-server")
    mount, volume = index_mount(spec)
    assert mount["readOnly"] is True
    assert volume["persistentVolumeClaim"] == {"claimName": "replay-index", "readOnly": True}
    assert "initContainers" not in spec


def test_the_object_storage_overlay_builds_the_index_before_the_server_starts() -> None:
    spec = pod(render(OBJECT_STORAGE), "replay-server")
    mount, volume = index_mount(spec)
    assert mount["readOnly"] is True and volume == {"name": "index", "emptyDir": {}}
    [init] = spec["initContainers"]
    assert init["image"] == spec["containers"][0]["image"]
    command = init["args"]
    assert command[0] == "index" and command[1].startswith("s3://")
    [writes] = [m for m in init["volumeMounts"] if m["name"] == volume["name"]]
    assert command[command.index("-o") + 1] == f"{writes['mountPath']}/run.idx"
    assert not writes.get("readOnly")
    assert init["envFrom"] == [{"secretRef": {"name": "replay-server-object-storage"}}]
    # the objects it fetches go to REPLAY_SERVER_CACHE: a volume it can write under its
    # read-only root (the image's own /cache is a volume Kubernetes does not make)
    [cache] = [e["value"] for e in init["env"] if e["name"] == "REPLAY_SERVER_CACHE"]
    assert any(cache.startswith(m["mountPath"] + "/") and not m.get("readOnly")
               for m in init["volumeMounts"])


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda f: f.name)
def test_every_container_is_pinned_bounded_and_runs_as_no_one_in_particular(
        folder: Path) -> None:
    for name in ("replay-server", "valkey"):
        spec = pod(render(folder), name)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["automountServiceAccountToken"] is False
        for container in containers(spec):
            image, _, tag = container["image"].rpartition(":")
            assert image and tag not in ("", "latest"), container["image"]
            if image == "replay-server":
                assert tag == replay_server.__version__  # the image docs/container.md builds
            assert container["resources"]["requests"] and container["resources"]["limits"]
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]}}


def values(obj: Any) -> list[tuple[str, Any]]:
    """Every (key, value) pair in `obj`, at any depth."""
    if isinstance(obj, dict):
        return [pair for k, v in obj.items() for pair in [(k, v), *values(v)]]
    if isinstance(obj, list):
        return [pair for item in obj for pair in values(item)]
    return []


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda f: f.name)
def test_no_secret_value_is_written_in_the_manifests(folder: Path) -> None:
    """Credentials are referenced by a Secret's name, never given: no Secret object, no
    environment variable with a value that looks like a credential."""
    objects = render(folder)
    assert not [o for o in objects if o["kind"] == "Secret"]
    for env in (v for k, v in values(objects) if k == "env"):
        for variable in env:
            secretish = any(word in variable["name"] for word in
                            ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL"))
            assert not (secretish and "value" in variable), variable
    assert not [v for k, v in values(objects) if k in ("stringData", "data")]
