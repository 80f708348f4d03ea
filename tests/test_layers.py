"""The house's rules, read from the code's own imports (`ast`), so that they cannot rot:

1. the stage folders follow the data flow, one way: a module imports only from its own
   folder, from an earlier stage, or from the top-level modules (errors, settings, paths);
   no cycle between folders;
2. only the web layer (`web/`) and the CLI entry import the web stack (fastapi, starlette,
   uvicorn); the replay service takes bytes and returns a reply without it;
3. no module touches a dependency's private names (a leading underscore, or an internal
   module such as `uvicorn.protocols`), but the one quarantined module that says why;
and the package's top level stays small.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "replay_server"
STAGES = ("wire", "saved", "index", "replay", "compare", "web", "commands")
TOP = {"__init__", "__main__", "cli", "errors", "paths", "settings"}
BASE = {"errors", "paths", "settings", "__init__"}  # importable from anywhere
WEB_STACK = ("fastapi", "starlette", "uvicorn")
# Internal modules of dependencies (not a leading underscore, but not public either).
INTERNAL = ("uvicorn.protocols", "uvicorn.supervisors", "uvicorn.lifespan", "uvicorn.loops",
            "starlette._", "fastapi._")
# The one module allowed to touch a dependency's internals: uvicorn has no public way to
# bound how long a client takes to send a request, nor to keep a chunked body's trailers
# out of the headers the app reads, so web.guarded extends uvicorn's internal HTTP
# protocol for both. Kept short, so that a new uvicorn has one small place to check.
QUARANTINE = {"web.guarded"}
QUARANTINE_MAX_LINES = 150


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names, line) of every import, relative ones resolved to the
    package's own module names (`replay_server.` left off)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[str, list[str], int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                found.append(("replay_server." + module if module else "replay_server",
                              [a.name for a in node.names], node.lineno))
            else:
                found.append((node.module or "", [a.name for a in node.names], node.lineno))
    return found


def _stage(module: str) -> str | None:
    head = module.split(".")[0]
    return head if head in STAGES else None


def _own(imported: str, names: list[str]) -> list[str]:
    """The package's modules an import names: `from . import a` names module `a`."""
    if imported != "replay_server" and not imported.startswith("replay_server."):
        return []
    module = imported.removeprefix("replay_server").removeprefix(".")
    subs = [f"{module}.{n}" if module else n for n in names]
    return [s for s in subs if s in MODULES] or ([module] if module else [])


def test_the_top_level_is_small() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top <= TOP and len(top) <= 10, top - TOP
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= set(STAGES), folders - set(STAGES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_follow_the_data_flow(name: str) -> None:
    stage = _stage(name)
    for imported, names, line in _imports(name, MODULES[name]):
        for target in _own(imported, names):
            where = f"{name} (line {line}) imports {target}"
            if target.split(".")[0] in BASE and "." not in target:
                continue
            if name in BASE:
                raise AssertionError(f"{where}: a top-level module imports only its peers")
            if name in ("cli", "__main__"):
                assert _stage(target) == "commands" or target == "cli", where
                continue
            target_stage = _stage(target)
            assert target_stage is not None, where
            assert stage is not None and STAGES.index(target_stage) <= STAGES.index(stage), \
                f"{where}: {target_stage} comes after {stage} in the data flow"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_web_layer_imports_the_web_stack(name: str) -> None:
    if _stage(name) == "web" or name == "cli":
        return
    for imported, _, line in _imports(name, MODULES[name]):
        assert imported.split(".")[0] not in WEB_STACK, f"{name} (line {line}) imports {imported}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_names_of_dependencies(name: str) -> None:
    if name in QUARANTINE:
        return
    tree = ast.parse(MODULES[name].read_text())
    aliases = {}
    for imported, names, line in _imports(name, MODULES[name]):
        if imported.startswith("replay_server") or not imported:
            continue
        assert not any(imported.startswith(i) for i in INTERNAL), \
            f"{name} (line {line}) imports the internal module {imported}"
        assert not any(part.startswith("_") and not part.startswith("__")
                       for part in imported.split(".")), \
            f"{name} (line {line}) imports the private module {imported}"
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        assert not private, f"{name} (line {line}) imports private names {private}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name.split(".")[0]: a.name for a in node.names})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            raise AssertionError(f"{name} (line {node.lineno}) uses "
                                 f"{aliases[node.value.id]}.{node.attr}")


def test_the_quarantine_is_one_short_module() -> None:
    for name in QUARANTINE:
        lines = len(MODULES[name].read_text().splitlines())
        assert lines <= QUARANTINE_MAX_LINES, f"{name} has {lines} lines"


def test_no_cycle_between_folders() -> None:
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        stage = _stage(name)
        for imported, names, _ in _imports(name, path):
            for target in _own(imported, names):
                other = _stage(target)
                if stage and other and other != stage:
                    edges.setdefault(stage, set()).add(other)
    seen: set[str] = set()

    def visit(stage: str, path: tuple[str, ...]) -> None:
        assert stage not in path, f"a cycle between folders: {' -> '.join(path + (stage,))}"
        if stage in seen:
            return
        for other in edges.get(stage, ()):
            visit(other, path + (stage,))
        seen.add(stage)

    for stage in edges:
        visit(stage, ())


# ---------------------------------------------------------------- the API families
# An API family is the one home of its shapes (docs/design.md, "Adding an API"): its
# package under wire/ holds what the server knows of its requests, saved answers, replies
# and streams; the registry (wire/families.py) imports it by name, and everything else
# asks the `Family` (wire/family.py). So adding an API adds one package and one line of
# the registry, and changes no other family's module.

REGISTRY = "wire.families"
WIRE_PACKAGES = sorted(p.name for p in (PACKAGE / "wire").iterdir()
                       if (p / "__init__.py").is_file())
# The batch protocols (wire/batches/): a layer over the families, no `Family` itself.
# vLLM's tokenizer endpoints: field tables and keys, but no `Family` (no samples, no
# streams); its chat form is chat's messages and tools, one normal form (not a copy).
NOT_FAMILIES = {"tokenizer", "batches"}
SHARED_FORMS = {("wire.tokenizer", "wire.chat")}
# Outside wire/, only these name a family's endpoint: a harness's reader writes records of
# the API its harness called, in that API's shape (as the harness itself does), and the
# web layer's routes route (GET /v1/responses/{id} is Responses').
NAMES_ENDPOINTS = ("saved.formats", "web.routes")


def _defines_family(package: str) -> bool:
    tree = ast.parse(MODULES[f"wire.{package}"].read_text())
    return any(isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "FAMILY" for t in node.targets)
        for node in tree.body)


FAMILY_PACKAGES = [p for p in WIRE_PACKAGES if p not in NOT_FAMILIES and _defines_family(p)]
# What families share (choices/: chat's and completions'), imported by family packages only.
SHARED_PACKAGES = [p for p in WIRE_PACKAGES if p not in NOT_FAMILIES and p not in
                   FAMILY_PACKAGES]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_registry_imports_each_family_by_name() -> None:
    """wire/families.py registers the families by plain imports (a reader follows them;
    no `import_module`), every package that makes a `FAMILY`, and nothing imports one of
    the package's own modules by a computed name."""
    registered = {target.removeprefix("wire.")
                  for imported, names, _ in _imports(REGISTRY, MODULES[REGISTRY])
                  for target in _own(imported, names)
                  if target.removeprefix("wire.") in WIRE_PACKAGES}
    assert registered == set(FAMILY_PACKAGES), registered ^ set(FAMILY_PACKAGES)
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and (
                    isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                    or isinstance(node.func, ast.Name)
                    and node.func.id in ("import_module", "__import__")):
                first = node.args[0] if node.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str) \
                    and not first.value.startswith(("replay_server", ".")), \
                    f"{name} (line {node.lineno}) imports a module by a computed name"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_family_package_is_imported_only_by_the_registry(name: str) -> None:
    """No module outside a family's package imports it, but the registry: the rest of the
    server asks the `Family`. A family's package imports no other family's (chat and
    completions share choices/, which only family packages import)."""
    if name == REGISTRY:
        return
    in_family = any(_within(name, f"wire.{p}") for p in FAMILY_PACKAGES + SHARED_PACKAGES)
    for imported, names, line in _imports(name, MODULES[name]):
        for target in _own(imported, names):
            for package in FAMILY_PACKAGES + SHARED_PACKAGES:
                owner = f"wire.{package}"
                if not _within(target, owner) or _within(name, owner):
                    continue
                if package in SHARED_PACKAGES and in_family:
                    continue
                if any(_within(name, a) and owner == b for a, b in SHARED_FORMS):
                    continue
                raise AssertionError(f"{name} (line {line}) imports {target}: ask the "
                                     "Family (wire/families.py) instead")


def _family_paths() -> dict[str, str]:
    """paths.py's names of the families' endpoints, and their paths."""
    from replay_server import paths
    from replay_server.wire.families import FAMILIES
    return {name: value for name, value in vars(paths).items()
            if isinstance(value, str) and value in FAMILIES}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_outside_wire_names_a_family_endpoint(name: str) -> None:
    """Outside wire/, nothing branches on which family a request or a record is of (as far
    as a static check can tell: no family endpoint named, by its constant or its path),
    but the harness readers and the routes (`NAMES_ENDPOINTS`)."""
    if _stage(name) == "wire" or name in BASE or any(_within(name, m)
                                                      for m in NAMES_ENDPOINTS):
        return
    family_paths = _family_paths()
    for imported, names, line in _imports(name, MODULES[name]):
        named = sorted(set(names) & set(family_paths)) if imported.endswith(".paths") else []
        assert not named, f"{name} (line {line}) imports {named}: ask the Family instead"
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Attribute) and node.attr in family_paths or isinstance(
                node, ast.Constant) and node.value in family_paths.values():
            raise AssertionError(f"{name} (line {node.lineno}) names a family's endpoint: "
                                 "ask the Family instead")
