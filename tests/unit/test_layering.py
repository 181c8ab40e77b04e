"""The layer rules of docs/architecture.md §1, checked on the source: engine is pure, layers don't cross."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names)

ALLOWED = {
    # numpy: array arithmetic over the policy bitsets (the access diff), no I/O; numba: the bulk
    # advice's compiled loops over those arrays
    "engine": {"engine", "networkx", "numpy", "numba"},
    "storage": {"engine", "storage", "duckdb", "orjson", "psycopg"},
    "pki": {"engine", "pki", "cryptography", "jwt", "pyotp", "argon2"},
    # the wire format both the controller and the router speak
    "channel": {"channel", "pki"},
    # a program of its own: nothing of the controller (engine, storage, api), only the wire
    # format and certificate helpers
    "router": {"router", "channel", "pki", "cryptography", "jwt", "nacl"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found - STDLIB


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_its_layer_may(package: str) -> None:
    offenders = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        extra = _imports(path) - ALLOWED[package]
        if extra:
            offenders[str(path.relative_to(ROOT))] = sorted(extra)
    assert offenders == {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _defines_register(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.FunctionDef) and node.name == "register" for node in tree.body)


def _imported_modules(path: Path, tree: ast.Module) -> set[str]:
    """Every module ``path`` imports, dotted and absolute (``from p import m`` counts ``p.m`` too)."""
    package = _module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module_name(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                module = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_no_resource_module_imports_another() -> None:
    """Modules that mount routes (``register(routes)``) share code through api/views.py, api/schemas,
    api/http.py, api/resources.py ..., never by importing one another (docs/architecture.md §3)."""
    resources: dict[str, tuple[Path, ast.Module]] = {}
    for path in sorted((ROOT / "api").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        if _defines_register(tree):
            resources[_module_name(path)] = (path, tree)
    assert {"api.management.services", "api.client.services", "api.authentication"} <= set(resources)
    offenders = {}
    for name, (path, tree) in resources.items():
        siblings = sorted((_imported_modules(path, tree) & set(resources)) - {name})
        if siblings:
            offenders[name] = siblings
    assert offenders == {}


# -- import cycles and the api layer's own rules ------------------------------------------------
PACKAGES = ("api", "controller", "engine", "storage", "pki", "bench", "channel", "router", "cluster")


def _runtime_imports(path: Path, tree: ast.Module, modules: set[str] | None = None) -> set[str]:
    """The modules ``path`` imports: every import, including those inside functions and those
    for annotations only (a cycle through ``if TYPE_CHECKING:`` is a cycle of the design). Given the
    known ``modules``, ``from p import m`` names ``p.m`` alone where that is a module (importing a
    submodule runs its package's ``__init__`` first in any case, so that is no edge back to it)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names = _imported_modules(path, ast.Module(body=[node], type_ignores=[]))
        if modules is not None and isinstance(node, ast.ImportFrom):
            subs = {n for n in names if "." in n and n in modules and n.rsplit(".", 1)[0] in names}
            base = {n for n in names if n not in subs and any(s.startswith(n + ".") for s in subs)}
            if subs and all(f"{n}.{a.name}" in subs for a in node.names for n in base):
                names = names - base
        found |= names
    return found


def _module_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}
    known = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[name] = {m for m in _runtime_imports(path, tree, known) if m in known and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    """No import cycle among our modules (a package's ``__init__`` re-exporting its own modules
    counts as part of the package: a module may not import its package's ``__init__`` back)."""
    graph = _module_graph()
    assert {"api.routing", "api.views", "pki.authority", "pki.tokens"} <= set(graph)
    assert _cycles(graph) == []


def test_cycle_detection_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_resources_and_wire_schemas_reach_storage_and_pki_only_through_ports() -> None:
    """A module that mounts routes, and a wire schema, imports neither ``storage`` nor ``pki``:
    certificates, keys and tokens are the CA port's (``ctrl.env.ca``, ``ctrl.pki``), data the
    managers'. The composition root and the server (app, cli, serve, tls, peer, ...) may."""
    offenders = {}
    for path in sorted((ROOT / "api").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        if not (_defines_register(tree) or "schemas" in path.relative_to(ROOT).parts):
            continue
        layers = sorted({m.split(".")[0] for m in _runtime_imports(path, tree)} & {"storage", "pki"})
        if layers:
            offenders[str(path.relative_to(ROOT))] = layers
    assert offenders == {}


def test_the_http_server_knows_no_edge_api() -> None:
    """The HTTP server ``trellis serve`` runs (``controller.serve``, ``.worker``, ``.tls``,
    ``.accesslog``) reaches the app only by building it (``controller.app``), never a resource
    module or a wire schema."""
    resources = set()
    for path in sorted((ROOT / "api").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        if _defines_register(tree) or "schemas" in path.relative_to(ROOT).parts:
            resources.add(_module_name(path))
    assert "api.client.services" in resources
    offenders = {}
    for name in ("serve", "worker", "tls", "accesslog"):
        path = ROOT / "controller" / f"{name}.py"
        tree = ast.parse(path.read_text(), filename=str(path))
        reached = sorted(m for m in _runtime_imports(path, tree) if m in resources)
        if reached:
            offenders[_module_name(path)] = reached
    assert offenders == {}


def test_api_is_the_http_side_and_the_process_is_the_controller_package() -> None:
    """``api`` is Falcon resources, wire schemas and their request plumbing; the process around
    them (composition, CLI, serving, control listener, supervision, cluster membership) is
    ``controller``, which ``api`` does not import: only ``controller.settings``, the configuration
    the API reads. Nothing below the API (engine, storage, pki, channel, router) imports either."""
    offenders = {}
    for path in sorted((ROOT / "api").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        process = sorted(
            m
            for m in _runtime_imports(path, tree)
            if m.split(".")[0] == "controller" and m.split(".")[:2] != ["controller", "settings"]
        )
        if process:
            offenders[str(path.relative_to(ROOT))] = process
    assert offenders == {}
    for module in (
        "app",
        "cli",
        "serve",
        "worker",
        "control",
        "embedded_router",
        "maintenance",
        "home",
        "logs",
    ):
        assert not (ROOT / "api" / f"{module}.py").exists()
        assert not (ROOT / "api" / module).exists()
