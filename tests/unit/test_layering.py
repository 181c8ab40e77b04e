"""The dependency rules of design.md §1, checked on the source: engine is pure, layers don't cross."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names)

ALLOWED = {
    "engine": {"engine", "networkx"},
    "storage": {"engine", "storage", "duckdb", "orjson"},
    "pki": {"engine", "pki", "cryptography", "jwt", "pyotp"},
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
    api/http.py, api/resources.py ..., never by importing one another (design.md §9)."""
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
