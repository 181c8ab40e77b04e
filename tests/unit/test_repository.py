"""The repository explains itself: no source file or document cites a path outside it
(docs/architecture.md §9 states the rule).

Rules, over every ``*.py`` and ``*.md`` file git tracks or would track (``git ls-files
--cached --others --exclude-standard``; without git, a walk that skips hidden and build
directories):

1. **No path leaves the repository.** A path written with ``../`` steps (``../x/y``) must resolve
   inside the repository: from the file's own folder in Markdown (where it is a link), from the
   repository root in Python (where it is prose in a docstring or comment). The one exception is
   :data:`ALLOWED_OUTSIDE`: OpenZiti's upstream API specs, data files that ``tests/e2e`` reads (CI
   has them beside the repository). The folders of reference material kept beside the
   repository (:data:`SHARED_FOLDER`) are never cited, with or without ``../``.
2. **The reference documents kept outside the repository are not cited by name.** Their facts
   live in ``docs/`` under names of the project's own (``docs/api.md``, ``docs/policy.md``...), so
   a mention of one of :data:`OUTSIDE_DOCS`, or of the design card (:data:`DESIGN`), is always a
   citation of one of them.
3. **Markdown links resolve.** A relative link in a ``.md`` file names a file inside the
   repository, and its ``#anchor``, if any, names a heading of that file (GitHub's rules for
   heading anchors).

This file must know those names; it writes each in two parts, so that it cites none of them
itself.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()

#: The folder beside the repository that holds the reference material.
SHARED = "sha" + "red"
#: The only thing outside the repository a file may name: data files tests read.
ALLOWED_OUTSIDE = (ROOT.parent / SHARED / "spec",)

#: ``../`` steps and the path after them.
PARENT_PATH = re.compile(r"(?<![\w.])((?:\.\./)+[\w.{},*/-]*)")
#: Folders of the outside reference material, cited with or without ``../``.
SHARED_FOLDER = re.compile(rf"\b{SHARED}/(?:docs|seeds)\b")
#: Names only the outside reference documents have.
OUTSIDE_DOCS = tuple(
    first + "-" + second
    for first, second in (
        ("policy", "semantics"),
        ("sdk", "compat"),
        ("tls", "notes"),
        ("edge", "protocol"),
        ("wire", "contract"),
    )
)
DOC_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*)(" + "|".join(OUTSIDE_DOCS) + r")(\.md)?(?![\w-])")
#: ``design`` is an ordinary word: only the card's file name and ``design §`` are citations.
DESIGN = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*)design(?:(\.md)\b|(?=\s*§))")
#: A Markdown link or image target: ``[text](target)``.
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
SKIPPED_DIRS = {"build", "dist", "node_modules", "__pycache__"}


def _files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode()
        paths = [ROOT / name for name in listed.split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        paths = [
            path
            for path in ROOT.rglob("*")
            if not any(
                part.startswith(".") or part in SKIPPED_DIRS or part.endswith(".egg-info")
                for part in path.relative_to(ROOT).parts[:-1]
            )
        ]
    return sorted(p for p in paths if p.suffix in (".py", ".md") and p.is_file() and p.resolve() != THIS)


FILES = _files()


def _inside(path: Path) -> bool:
    return path.resolve().is_relative_to(ROOT)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def outside_paths(file: Path, text: str) -> list[str]:
    """Rule 1: paths leaving the repository (other than the allowed data files)."""
    found = []
    base = file.parent if file.suffix == ".md" else ROOT
    for match in PARENT_PATH.finditer(text):
        target = (base / match.group(1)).resolve()
        if _inside(target) or any(target.is_relative_to(allowed) for allowed in ALLOWED_OUTSIDE):
            continue
        found.append(f"{_line(text, match.start())}: {match.group(1)}")
    found += [f"{_line(text, m.start())}: {m.group(0)}" for m in SHARED_FOLDER.finditer(text)]
    return found


def outside_documents(file: Path, text: str) -> list[str]:
    """Rule 2: the outside reference documents cited by name."""
    return [
        f"{_line(text, match.start())}: {match.group(0)}"
        for pattern in (DOC_NAME, DESIGN)
        for match in pattern.finditer(text)
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    prose = FENCE.sub("", text)
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose, re.M):
        base = slug(heading)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def broken_links(file: Path, text: str) -> list[str]:
    """Rule 3: relative Markdown links to missing files or headings."""
    found = []
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for match in LINK.finditer(prose):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        path_part, _, anchor = target.partition("#")
        dest = (file.parent / path_part).resolve() if path_part else file
        where = f"{_line(prose, match.start())}: {target}"
        if not _inside(dest) or not dest.exists():
            found.append(f"{where} (no such file in the repository)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            found.append(f"{where} (no such heading)")
    return found


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_scan_sees_the_sources_and_the_docs() -> None:
    names = {_relative(p) for p in FILES}
    assert {"README.md", "docs/architecture.md", "engine/policy/graph.py", "controller/app.py"} <= names


@pytest.mark.parametrize("rule", [outside_paths, outside_documents], ids=["paths", "documents"])
def test_no_file_cites_anything_outside_the_repository(rule: Callable[[Path, str], list[str]]) -> None:
    offenders = {}
    for path in FILES:
        found = rule(path, path.read_text(encoding="utf-8", errors="replace"))
        if found:
            offenders[_relative(path)] = found
    assert offenders == {}, "cite docs/ instead (see this test's docstring for the rules)"


def test_markdown_links_resolve() -> None:
    offenders = {}
    for path in FILES:
        if path.suffix == ".md":
            found = broken_links(path, path.read_text(encoding="utf-8"))
            if found:
                offenders[_relative(path)] = found
    assert offenders == {}


# -- the rules themselves ---------------------------------------------------------------------

POLICY, SDK, _, _, WIRE = OUTSIDE_DOCS
DESIGN_CARD = "design" + ".md"


@pytest.mark.parametrize(
    ("name", "text", "flagged"),
    [
        ("engine/x.py", f"see {POLICY} §1.2", True),
        ("engine/x.py", f"(``{SHARED}/docs/{SDK}.md`` §1)", True),
        ("engine/x.py", f"as in ../{SHARED}/docs/{DESIGN_CARD}", True),
        ("engine/x.py", f"{DESIGN_CARD} §5", True),
        ("engine/x.py", f"{WIRE} §5.3", True),
        ("engine/x.py", f"the specs (``../{SHARED}/spec/client.yml``)", False),
        ("engine/x.py", f"see docs/{WIRE}.md §5.3", True),
        ("engine/x.py", "see docs/api.md §5.3 and docs/policy.md §1.2", False),
        ("engine/x.py", "a design decision; the design §", True),
        ("engine/x.py", "the design of the worker", False),
        ("docs/x.md", f"[contract]({WIRE}.md#5-lists)", True),
        ("docs/x.md", "[contract](api.md#5-lists)", False),
        ("docs/x.md", f"[seeds](../../{SHARED}/seeds/000.txt)", True),
        ("README.md", "[contract](docs/api.md)", False),
        ("README.md", "[up](../elsewhere/notes.md)", True),
    ],
)
def test_the_citation_rules(name: str, text: str, flagged: bool) -> None:
    file = ROOT / name
    assert bool(outside_paths(file, text) + outside_documents(file, text)) is flagged


def test_heading_anchors_follow_github() -> None:
    text = "# A title\n## 5.2 `POST /sessions`\n## 12. Deviations from OpenZiti (deliberate)\n## A title\n"
    assert anchors(text) == {
        "a-title",
        "52-post-sessions",
        "12-deviations-from-openziti-deliberate",
        "a-title-1",
    }
