"""Controllers are durable members of the network, and routers follow them: real ``trellis serve``
processes on one PostgreSQL database and a standalone ``trellis router run``.

A router enrolled while one controller ran is told of a second controller that joins later
(``UPDATE_CTRL_ADDRESSES``) and connects to it, keeping both in ``router.json``; the second
controller, stopped, is listed with ``isOnline`` false; ``trellis controller remove`` forgets it,
and the router stops trying it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pki.authority import PkiPaths
from tests.e2e.server import HOST, MGMT, ROOT, TRELLIS, Server, free_port, tail

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.seconds(50)]

DEADLINE_SECONDS = 60.0


def wait_for(condition: Callable[[], bool], what: str, explain: Callable[[], str]) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_SECONDS:.0f} s\n{explain()}"
        time.sleep(0.2)


def listed(server: Server, token: str) -> list[dict[str, Any]]:
    got = server.expect(server.call("GET", f"{MGMT}/controllers", token), 200, "list the controllers")
    return list(got["data"])


def test_a_router_follows_a_controller_that_joins_later_and_one_removed(
    tmp_path: Path, postgres_url: str
) -> None:
    env = {"TRELLIS_DATABASE_URL": postgres_url, "TRELLIS_WORKERS": "1"}
    a = Server(tmp_path / "a" / "home", env=env, log=tmp_path / "a.log")
    b = Server(tmp_path / "b" / "home", env=env, log=tmp_path / "b.log")
    router_dir = tmp_path / "router"
    router_log = tmp_path / "router.log"
    router_env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
    router_env.update(
        {
            "TRELLIS_ROUTER_HOME": str(router_dir),
            "TRELLIS_ROUTER_EDGE_BIND": f"{HOST}:{free_port()}",
            "TRELLIS_ROUTER_ADVERTISE": HOST,
        }
    )
    router: subprocess.Popen[bytes] | None = None

    def explain() -> str:
        logs = (
            [f"--- router:\n{tail(router_log.read_text(errors='replace'), 4000)}"]
            if router_log.exists()
            else []
        )
        return "\n".join([*logs, a.log_tail(3000), b.log_tail(3000)])

    def ctrls() -> list[str]:
        return list(json.loads((router_dir / "router.json").read_text())["ctrls"])

    def router_says(line: str) -> bool:
        return router_log.exists() and line in router_log.read_text(errors="replace")

    try:
        a.up()
        token = a.login()
        created = a.expect(
            a.call(
                "POST", f"{MGMT}/edge-routers", token, json={"name": "er-follows", "isTunnelerEnabled": False}
            ),
            201,
            "create the router",
        )
        router_id = created["data"]["id"]
        jwt_text = a.expect(a.call("GET", f"{MGMT}/edge-routers/{router_id}", token), 200, "the router")[
            "data"
        ]["enrollmentJwt"]
        (tmp_path / "router.jwt").write_text(jwt_text)
        enrolled = subprocess.run(
            [*TRELLIS, "router", "enroll", str(tmp_path / "router.jwt")],
            env=router_env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert enrolled.returncode == 0, enrolled.stderr
        a_ctrl = f"{HOST}:{a.ctrl_port}"
        assert ctrls() == [a_ctrl]
        with router_log.open("ab") as sink:
            router = subprocess.Popen(
                [*TRELLIS, "router", "run"],
                env=router_env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
            )
        wait_for(lambda: router_says(f"control {a_ctrl}: up"), "the router connects to A", explain)

        # B joins the network: A's CA without A's server certificate, `trellis init`, `serve`
        b.pki.mkdir(parents=True)
        a_paths = PkiPaths.in_directory(a.pki)
        for path in a_paths.all_files():
            if path not in (a_paths.server_cert, a_paths.server_key):
                shutil.copy2(path, b.pki / path.name)
        b.up()
        b_id = (b.home / "controller.id").read_text().strip()
        b_ctrl = f"{HOST}:{b.ctrl_port}"
        wait_for(lambda: router_says(f"control {b_ctrl}: up"), "the router connects to B", explain)
        assert ctrls() == [a_ctrl, b_ctrl]  # kept for the router's next start
        wait_for(
            lambda: [(c["id"], c["isOnline"]) for c in listed(a, token)][1:] == [(b_id, True)],
            "A lists B online",
            explain,
        )

        b.stop()  # away: still a member, listed offline; the router keeps trying it
        wait_for(
            lambda: [(c["id"], c["isOnline"]) for c in listed(a, token)][1:] == [(b_id, False)],
            "A lists B offline",
            explain,
        )
        assert ctrls() == [a_ctrl, b_ctrl]

        removed = subprocess.run(
            [*TRELLIS, "controller", "remove", b_id],
            env=a.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert removed.returncode == 0, removed.stderr
        assert f"removed controller {b_id}" in removed.stdout
        wait_for(lambda: ctrls() == [a_ctrl], "the router drops B", explain)
        assert [c["id"] for c in listed(a, token)] == [a.home.joinpath("controller.id").read_text().strip()]
        assert router.poll() is None, explain()
    finally:
        if router is not None and router.poll() is None:
            router.terminate()
            router.wait(20)
        b.stop()
        a.stop()
