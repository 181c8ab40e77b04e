"""The README's table of operations is exactly what the app registers."""

from __future__ import annotations

from pathlib import Path

from api.routes_table import BEGIN, END, render
from tests.conftest import Api

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_operation_table_matches_the_routes(anon: Api) -> None:
    text = README.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == render(anon.app.routes.table), "regenerate with: python -m api.routes_table"
