"""``POST /database/snapshot`` on a running server, then ``trellis restore`` once it is stopped."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.server import MGMT, ROOT, TRELLIS, Server

pytestmark = [pytest.mark.e2e, pytest.mark.seconds(23)]


def restore(server: Server, snapshot: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TRELLIS, "restore", str(snapshot)],
        env=server.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def service_names(server: Server, token: str) -> set[str]:
    listed = server.expect(server.call("GET", f"{MGMT}/services", token), 200, "list services")
    return {row["name"] for row in listed["data"]}


def test_a_snapshot_restored_brings_back_the_database_of_its_moment(tmp_path: Path) -> None:
    with Server(tmp_path / "home") as server:
        server.up()
        token = server.login()
        body = {"name": "before-snapshot", "encryptionRequired": True}
        server.expect(server.call("POST", f"{MGMT}/services", token, json=body), 201, "create")
        server.expect(server.call("POST", f"{MGMT}/database/snapshot", token), 200, "snapshot")
        body = {"name": "after-snapshot", "encryptionRequired": True}
        server.expect(server.call("POST", f"{MGMT}/services", token, json=body), 201, "create")
        db = server.home / "trellis.duckdb"
        (snapshot,) = (p for p in server.home.iterdir() if p.name.startswith("trellis.duckdb-"))

        while_serving = restore(server, snapshot)
        assert service_names(server, token) >= {"before-snapshot", "after-snapshot"}
        server.stop()
        stopped = restore(server, snapshot)
        server.start()
        token = server.login()
        names = service_names(server, token)

    assert while_serving.returncode != 0
    assert "is in use by a running server: stop it first" in while_serving.stderr
    assert stopped.returncode == 0, stopped.stderr
    assert f"restored {db} from {snapshot}" in stopped.stdout
    assert "before-snapshot" in names
    assert "after-snapshot" not in names
    kept = [p for p in server.home.iterdir() if p.name.startswith("trellis.duckdb.pre-restore-")]
    assert len(kept) == 1
    assert f"the replaced database is kept as {kept[0]}" in stopped.stdout
