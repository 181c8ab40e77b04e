"""A store used in a child process that is then killed with SIGKILL (no close, no flush)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

#: What the child's script starts with: the names its body uses.
PRELUDE = """
import os
from datetime import UTC, datetime
from pathlib import Path
from engine.entities import all as _
from engine.entities.identities import Identity
from engine.ports import Delete, Put
from storage.duckdb import DuckDBStore
now = datetime.now(UTC)
"""


def run_killed(body: str) -> None:
    """Run ``body`` (Python, after :data:`PRELUDE`) in a child process, which then kills itself
    with SIGKILL; fail unless the body ran to its end."""
    script = (
        PRELUDE + textwrap.dedent(body) + '\nprint("acknowledged", flush=True)\nos.kill(os.getpid(), 9)\n'
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=Path(__file__).parents[3]
    )
    assert "acknowledged" in done.stdout, done.stderr
    assert done.returncode == -9
