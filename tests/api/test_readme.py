"""The documented table of operations is exactly what the app registers, and the README keeps
the test command CI reads.

The table lives in ``docs/api.md`` (§11), between the markers of
:mod:`controller.routes_table`; regenerate it with ``python -m controller.routes_table``.
"""

from __future__ import annotations

from pathlib import Path

from controller.routes_table import BEGIN, END, render
from tests.conftest import Api

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS_DOC = ROOT / "docs/api.md"
README = ROOT / "README.md"


def test_documented_operation_table_matches_the_routes(anon: Api) -> None:
    text = OPERATIONS_DOC.read_text()
    assert text.count(BEGIN) == 1, f"one generated table in {OPERATIONS_DOC.name}"
    assert text.count(END) == 1, f"one generated table in {OPERATIONS_DOC.name}"
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == render(anon.app.routes.table), (
        "regenerate with: python -m controller.routes_table"
    )


def test_readme_names_the_test_command_ci_runs() -> None:
    """``.ci/run`` runs ``make test``; the README says so in its two commands."""
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "\nmake test " in README.read_text()
