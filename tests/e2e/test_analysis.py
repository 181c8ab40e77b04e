"""``/analysis/v1`` against a real ``trellis serve`` (docs/analysis.md): what-if then apply, a
stale apply's 409, a guardrail's 409, and the ``trellis explain|what-if|check`` commands run as an
operator runs them. One server for the module."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.server import MGMT, ROOT, TRELLIS, Server, running

pytestmark = [pytest.mark.e2e, pytest.mark.seconds(25)]

A = "/analysis/v1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(tmp_path_factory.mktemp("analysis") / "home")


@pytest.fixture(scope="module")
def net(server: Server) -> dict[str, Any]:
    token = server.login()

    def create(path: str, body: dict[str, Any]) -> str:
        return str(server.expect(server.call("POST", MGMT + path, token, json=body), 201, path)["data"]["id"])

    ids: dict[str, Any] = {"token": token}
    ids["alice"] = create(
        "/identities", {"name": "alice", "type": "User", "isAdmin": False, "roleAttributes": ["staff"]}
    )
    ids["bob"] = create(
        "/identities", {"name": "bob", "type": "User", "isAdmin": False, "roleAttributes": ["contractor"]}
    )
    ids["web"] = create("/services", {"name": "web", "encryptionRequired": True, "roleAttributes": ["web"]})
    ids["payroll"] = create(
        "/services", {"name": "payroll", "encryptionRequired": True, "roleAttributes": ["finance"]}
    )
    ids["dial"] = create(
        "/service-policies",
        {
            "name": "staff-web",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#staff"],
            "serviceRoles": ["#web"],
        },
    )
    return ids


def trellis(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
    env.update(
        TRELLIS_HOME=str(server.home),
        TRELLIS_BIND=server.env["TRELLIS_BIND"],
        TRELLIS_ADMIN_PASSWORD=server.password,
    )
    return subprocess.run([*TRELLIS, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)


def grant_bob_web(policy: str) -> list[dict[str, Any]]:
    return [
        {
            "op": "patch",
            "kind": "service-policies",
            "id": policy,
            "body": {"identityRoles": ["#staff", "#contractor"]},
        }
    ]


def test_what_if_then_apply_and_a_stale_apply_is_409(server: Server, net: dict[str, Any]) -> None:
    token = net["token"]
    items = grant_bob_web(net["dial"])
    answer = server.expect(server.call("POST", A + "/what-if", token, json={"items": items}), 200, "what-if")[
        "data"
    ]
    assert answer["services"]["added"] == [
        {"identityId": net["bob"], "serviceId": net["web"], "type": "Dial"}
    ]
    applied = server.call("POST", A + "/apply", token, json={"items": items, "revision": answer["revision"]})
    assert server.expect(applied, 200, "apply")["data"]["summary"]["servicesAdded"] == 1
    stale = server.call("POST", A + "/apply", token, json={"items": items, "revision": answer["revision"]})
    body = server.expect(stale, 409, "stale apply")
    assert body["error"]["code"] == "ACCESS_CHANGED"
    assert body["error"]["cause"]["changes"]["services"]["added"] == answer["services"]["added"]


def test_a_guardrail_refuses_a_management_write(server: Server, net: dict[str, Any]) -> None:
    token = net["token"]
    guardrail = {
        "name": "no-contractor-finance",
        "form": "deny",
        "identityRoles": ["#contractor"],
        "serviceRoles": ["#finance"],
    }
    made = server.expect(server.call("POST", A + "/guardrails", token, json=guardrail), 201, "guardrail")
    policy = {
        "name": "all-payroll",
        "type": "Dial",
        "semantic": "AnyOf",
        "identityRoles": ["#all"],
        "serviceRoles": ["#finance"],
    }
    body = server.expect(server.call("POST", MGMT + "/service-policies", token, json=policy), 409, "refused")
    assert body["error"]["code"] == "GUARDRAIL_VIOLATION"
    assert "no-contractor-finance" in body["error"]["cause"]["reason"]
    server.expect(server.call("DELETE", f"{A}/guardrails/{made['data']['id']}", token), 200, "delete")


def test_the_explain_and_what_if_commands(server: Server, net: dict[str, Any], tmp_path: Path) -> None:
    granted = trellis(server, "explain", "alice", "web")  # by policy; no router exists (exit 1)
    assert granted.returncode == 1, granted.stderr
    assert granted.stdout.startswith("DENIED: identity alice, Dial service web")
    assert "checks: policy ok" in granted.stdout
    assert "granted by staff-web" in granted.stdout
    assert "missing (1): no common router" in granted.stdout
    denied = trellis(server, "explain", net["alice"], "payroll", "--type", "Bind")
    assert denied.returncode == 1, denied.stderr
    assert "checks: policy NO" in denied.stdout
    unknown = trellis(server, "explain", "nobody", "web")
    assert (unknown.returncode, unknown.stderr.strip()) == (2, "trellis explain: no identity named 'nobody'")

    batch = tmp_path / "batch.yaml"
    batch.write_text(
        "items:\n"
        f"  - {{op: patch, kind: identities, id: {net['alice']}, body: {{roleAttributes: [staff, finance]}}}}\n"
    )
    shown = trellis(server, "what-if", str(batch))
    assert shown.returncode == 0, shown.stderr
    assert "services: +0 -0" in shown.stdout
    applied = trellis(server, "what-if", str(batch), "--apply")
    assert applied.returncode == 0, applied.stderr
    assert "applied: revision" in applied.stdout
    alice = server.call("GET", f"{MGMT}/identities/{net['alice']}", net["token"]).json()["data"]
    assert alice["roleAttributes"] == ["finance", "staff"]


def test_check_lists_new_access_of_a_batch_against_a_snapshot(
    server: Server, net: dict[str, Any], tmp_path: Path
) -> None:
    token = net["token"]
    body = server.expect(server.call("POST", MGMT + "/database/snapshot", token), 200, "snapshot")
    base = str(body["data"]["path"])  # one snapshot: they are rate limited
    same = trellis(server, "check", "--no-new-access", base, base)
    assert (same.returncode, same.stdout.strip()) == (0, "0 new access pair(s), 0 removed")
    policy = {
        "name": "staff-payroll",
        "type": "Bind",
        "semantic": "AnyOf",
        "identityRoles": ["#staff"],
        "serviceRoles": ["#finance"],
    }
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps({"items": [{"op": "create", "kind": "service-policies", "body": policy}]}))
    found = trellis(server, "check", "--no-new-access", base, str(batch))
    assert found.returncode == 1, found.stderr
    assert f"NEW Bind: identity alice ({net['alice']}) -> service payroll ({net['payroll']})" in found.stdout
    assert found.stdout.strip().endswith("1 new access pair(s), 0 removed")
    removal = [{"op": "delete", "kind": "service-policies", "id": net["dial"]}]
    batch.write_text(json.dumps({"items": removal}))
    removed = trellis(server, "check", "--no-new-access", base, str(batch))
    assert removed.returncode == 0, removed.stdout + removed.stderr


def test_advise_from_a_controller_as_parquet(server: Server, net: dict[str, Any], tmp_path: Path) -> None:
    """``trellis advise --controller ... --format parquet``: the server's streamed Parquet body,
    written as it comes, holds the rows the same command gives as JSON lines."""
    from tests.unit.engine.test_advise_parquet import read_rows

    remote = ["--controller", server.url, "--token", net["token"], "--ca", server.ca]
    out = tmp_path / "advice.parquet"
    written = trellis(server, "advise", *remote, "--format", "parquet", "--out", str(out))
    assert written.returncode == 0, written.stderr
    as_json = trellis(server, "advise", *remote, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    rows = read_rows(out.read_bytes())
    assert rows == [json.loads(line) for line in as_json.stdout.splitlines()]
    web = {r["identityName"]: r for r in rows if r["serviceName"] == "web"}
    assert (web["alice"]["status"], web["alice"]["dial"], web["alice"]["dialPolicies"]) == (
        "ERROR",
        True,
        ["staff-web"],
    )
    assert web["alice"]["errors"][0].startswith("Identity has no edge routers assigned")
    assert web["alice"]["onlineCommonRouterCount"] == 0  # a controller knows who is online
    refused = tmp_path / "refused.parquet"
    bad = trellis(
        server,
        "advise",
        *remote[:2],
        "--token",
        "nope",
        *remote[4:],
        "--format",
        "parquet",
        "--out",
        str(refused),
    )
    assert bad.returncode != 0
    assert "401" in bad.stderr, bad.stderr
    assert not refused.exists()  # no empty file left behind
