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
