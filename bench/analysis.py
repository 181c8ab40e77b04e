"""``python -m bench analysis --tier L``: the access analysis API's figures (docs/analysis.md §12).

A controller is built in this process over an in-memory store holding a tier's generated network
(``bench/topology.py``: at L 100,000 identities, 10,000 services, 1,000 routers), with its
Falcon app; then, on random pairs and policies of that network:

- **explain**: why an identity may (not) Dial a service, asked of the analysis manager
  (``in-process``) and through the whole API stack (``wsgi``: the app's middleware,
  authentication, rendering and JSON, through ``falcon.testing``, without sockets);
- **what-if** of one policy edit: a service policy gaining one identity attribute; and of an
  ``#all`` edit: Dial service policies' identity roles replaced by ``#all`` in one batch (the
  policies chosen so that the edits add about a million (identity, service) pairs: their
  services times the identities that could not Dial them yet), through the API (whose answer
  lists 10,000 pairs and counts them all) and through the manager (every pair listed);
- **a write with guardrails**: a service policy's identity roles changed through the manager (a
  real write: staged, committed and published), with no guardrail, then with guardrails in
  ``enforce`` mode that the write does not touch, then with one it touches (a ``deny`` of every
  identity on the policy's own services, which the write, adding an attribute nobody carries,
  does not violate: the graph is forked and compared); the difference of the first two is what
  guardrails add to an untouched write.

p50 and p99 in milliseconds over ``--runs`` repetitions (default: 200 explanations, 30
one-edit what-ifs (``--what-if-runs``), 5 ``#all`` what-ifs each way (``--all-runs``), 200 writes
each way). The network is loaded with the cyclic collector off, then frozen
out of its way, as the serving worker loads it (``controller/serve.py``); so is what the bench
itself keeps.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import falcon.testing

from bench.serving import PASSWORD, init_home
from bench.startup import _entities
from bench.topology import TIERS
from engine.entities.identities import Identity
from engine.entities.policies import ServicePolicy
from engine.entities.services import Service

ADMIN = "admin"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", choices=sorted(TIERS), default="S")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=200, help="explanations and writes measured")
    parser.add_argument("--what-if-runs", type=int, default=30, help="one-edit what-ifs measured")
    parser.add_argument("--all-runs", type=int, default=5, help="`#all` what-ifs measured (each way)")
    parser.add_argument(
        "--finding-runs", type=int, default=10, help="findings fixed and evaluations measured"
    )
    parser.add_argument(
        "--offline", action="store_true", help="findings with no router online (default: every router online)"
    )


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]
    return statistics.median(ordered), p99


def _time(fn: Callable[[int], Any], runs: int, warmup: int = 3) -> list[float]:
    for n in range(warmup):
        fn(-1 - n)
    out = []
    for n in range(runs):
        start = time.perf_counter()
        fn(n)
        out.append((time.perf_counter() - start) * 1e3)
    return out


class Bench:
    """A controller over a tier's network, with its app and an admin's token."""

    def __init__(self, tier: str, seed: int, home: Path) -> None:
        from controller.app import create_app
        from controller.settings import Settings
        from engine.analysis import analysis_for
        from engine.managers.bootstrap import create_default_admin
        from storage.memory import MemoryStore

        init_home(home)
        settings = Settings.from_env({"TRELLIS_HOME": str(home)})
        store = MemoryStore(background=True)
        started = time.perf_counter()
        collecting = gc.isenabled()
        gc.disable()  # as the serving worker loads (controller/serve.py)
        try:
            store.load(_entities(tier, seed))
            self.app = create_app(settings, store=store)
            gc.freeze()
        finally:
            if collecting:
                gc.enable()
        self.load_seconds = time.perf_counter() - started
        self.ctrl = self.app.ctrl
        self.managers = self.ctrl.managers
        self.analysis = analysis_for(self.managers)
        create_default_admin(self.ctrl.env, ADMIN, PASSWORD)
        self.client = falcon.testing.TestClient(self.app)
        login = self.client.simulate_post(
            "/edge/management/v1/authenticate",
            params={"method": "password"},
            json={"username": ADMIN, "password": PASSWORD},
        )
        self.headers = {"zt-session": login.json["data"]["token"]}
        view = store.view()
        self.identities = sorted(i.id for i in view.all(Identity))
        self.services = sorted(s.id for s in view.all(Service))
        self.policies = sorted(p.id for p in view.all(ServicePolicy) if "#all" not in p.identity_roles)
        self.rng = random.Random(seed)
        # the bench's own lists (every identity id) and what the login made are frozen too: left
        # in the collector's way, each full collection during a measured request traversed them
        # (20 ms at tier L)
        gc.freeze()

    def close(self) -> None:
        self.ctrl.env.store.close()

    # -- explain ------------------------------------------------------------------------------
    def pairs(self, n: int) -> list[tuple[str, str]]:
        return [(self.rng.choice(self.identities), self.rng.choice(self.services)) for _ in range(n)]

    def explain(self, runs: int) -> dict[str, tuple[float, float]]:
        pairs = self.pairs(runs + 3)

        def manager(n: int) -> None:
            identity, service = pairs[n]
            self.analysis.explain_service(identity, service, "Dial")

        def wsgi(n: int) -> None:
            identity, service = pairs[n]
            result = self.client.simulate_get(
                f"/analysis/v1/identities/{identity}/services/{service}",
                params={"type": "Dial"},
                headers=self.headers,
            )
            assert result.status_code == 200, result.text

        return {
            "in-process": _percentiles(_time(manager, runs)),
            "wsgi": _percentiles(_time(wsgi, runs)),
        }

    # -- what-if ------------------------------------------------------------------------------
    def edit(self, n: int) -> dict[str, Any]:
        """One policy edit: a service policy gaining one identity attribute."""
        policy = self.managers.service_policies.require(self.policies[n % len(self.policies)])
        roles = sorted({*policy.identity_roles, f"#bench-{n % 7}"})
        return {"op": "patch", "kind": "service-policies", "id": policy.id, "body": {"identityRoles": roles}}

    def what_if(self, runs: int) -> dict[str, tuple[float, float]]:
        def wsgi(n: int) -> None:
            result = self.client.simulate_post(
                "/analysis/v1/what-if", json={"items": [self.edit(n)]}, headers=self.headers
            )
            assert result.status_code == 200, result.text

        return {"wsgi": _percentiles(_time(wsgi, runs))}

    def all_edit(self, target: int = 1_000_000) -> tuple[list[dict[str, Any]], int]:
        """Dial service policies whose identity roles become ``#all``, adding about ``target``
        (identity, service) pairs (the items, and that number).

        One policy's edit adds its services times the identities that could not Dial them yet: at
        tier L about 80,000 to 333,000 for a policy of at most 40 services (more services: millions),
        so the edits of the policies adding most (but not past ``target``) are batched until the
        services they select, together, add within 5 % of ``target``."""
        from engine.policy import IDENTITY, SERVICE, SERVICE_POLICY

        with self.managers.access.reading() as (graph, _):
            everyone = graph.entity_bits(IDENTITY)

            def gained(service_id: str) -> int:
                policies = graph.entity_policy_bits(SERVICE_POLICY, SERVICE, service_id, "Dial")
                return (everyone & ~graph.member_union_bits(SERVICE_POLICY, IDENTITY, policies)).bit_count()

            candidates: list[tuple[int, str, list[str]]] = []
            for policy_id in self.policies:
                record = graph.policy(SERVICE_POLICY, policy_id)
                count = graph.policy_member_count(SERVICE_POLICY, policy_id, SERVICE)
                if record.type != "Dial" or not count or count > 40:
                    continue
                services = graph.policy_members(SERVICE_POLICY, policy_id, SERVICE)
                candidates.append((sum(gained(s) for s in services), policy_id, services))
            candidates.sort(key=lambda c: (-c[0], c[1]))
            chosen: list[str] = []
            covered: set[str] = set()
            added = 0
            for _, policy_id, services in candidates:
                more = sum(gained(s) for s in services if s not in covered)
                if added + more > target * 1.05:
                    continue  # too many: a smaller one may fit
                chosen.append(policy_id)
                covered.update(services)
                added += more
                if added >= target * 0.95:
                    break
        items = [
            {"op": "patch", "kind": "service-policies", "id": p, "body": {"identityRoles": ["#all"]}}
            for p in chosen
        ]
        return items, added

    def what_if_all(self, runs: int) -> tuple[int, int, dict[str, tuple[float, float]]]:
        """The ``#all`` edits' what-if: through the API, and through the manager (how many
        policies, how many pairs, the figures)."""
        from engine.analysis.manager import Operation

        items, pairs = self.all_edit()

        def wsgi(n: int) -> None:
            result = self.client.simulate_post(
                "/analysis/v1/what-if", json={"items": items}, headers=self.headers
            )
            assert result.status_code == 200, result.text
            assert result.json["data"]["summary"]["servicesAdded"] == pairs, result.json["data"]["summary"]

        def edit(policy_id: str) -> Callable[[Any], None]:
            def run(m: Any) -> None:
                m.update(policy_id, {"identity_roles": ["#all"]})

            return run

        operations = [Operation("service_policies", "patch", item["id"], edit(item["id"])) for item in items]

        def in_process(n: int) -> None:
            answer = self.analysis.what_if(operations)
            assert len(answer.diff.services_added) == pairs

        return (
            len(items),
            pairs,
            {
                "wsgi": _percentiles(_time(wsgi, runs, warmup=1)),
                "in-process": _percentiles(_time(in_process, runs, warmup=1)),
            },
        )

    # -- writes with guardrails -----------------------------------------------------------------
    def writes(self, runs: int) -> dict[str, tuple[float, float]]:
        """One service policy update per run, through the manager (staged, committed, published)."""
        policy_id = self.policies[0]
        manager = self.managers.service_policies
        base = sorted(manager.require(policy_id).identity_roles)

        def write(n: int) -> None:
            manager.update(policy_id, {"identity_roles": [*base, f"#bench-write-{n % 2}"]})

        out = {"no guardrail": _percentiles(_time(write, runs))}
        guardrails = self.managers_guardrails()
        made = []
        for n in range(5):  # untouched: attributes nobody carries
            made.append(
                guardrails.create(
                    {
                        "name": f"bench-untouched-{n}",
                        "form": "deny",
                        "mode": "enforce",
                        "identity_roles": [f"#nobody-{n}"],
                        "service_roles": [f"#nothing-{n}"],
                        "type": "Dial",
                    }
                ).id
            )
        out["5 guardrails, untouched"] = _percentiles(_time(write, runs))
        out["the guardrail check alone, 5 untouched"] = _percentiles(_time(self._check(policy_id, n=0), runs))
        policy = manager.require(policy_id)
        made.append(  # touched: any identity, the policy's services and type (nothing is added)
            guardrails.create(
                {
                    "name": "bench-touched",
                    "form": "deny",
                    "mode": "enforce",
                    "semantic": policy.semantic,
                    "identity_roles": ["#all"],
                    "service_roles": list(policy.service_roles),
                    "type": policy.type,
                }
            ).id
        )
        out["6 guardrails, one touched"] = _percentiles(_time(write, max(10, runs // 10)))
        for guardrail_id in made:
            guardrails.delete(guardrail_id)
        return out

    def _check(self, policy_id: str, n: int) -> Callable[[int], Any]:
        """The check every write passes (``Env.checks``), on its own, for the write above."""
        import dataclasses

        from engine.ports import Put

        policy = self.managers.service_policies.require(policy_id)
        store = self.ctrl.env.store

        def check(k: int) -> None:
            changed = dataclasses.replace(
                policy, identity_roles=[*policy.identity_roles, f"#bench-write-{k % 2}"]
            )
            with store.write_lock():
                self.analysis.checker.verdicts([Put(changed)])

        return check

    def managers_guardrails(self) -> Any:
        return self.analysis.guardrails

    # -- findings -------------------------------------------------------------------------------
    def routers_online(self) -> int:
        """Every router marked online, as if connected (a running network; with none online,
        every granted service has a finding)."""
        from engine.entities.routers import EdgeRouter
        from engine.managers.fleet import VersionInfo

        fleet = self.managers.fleet
        routers = list(self.ctrl.env.store.view().all(EdgeRouter))
        for router in routers:
            fleet.connect(
                router.id,
                name=router.name,
                fingerprint="",
                hostname="bench",
                protocols={"tls": "tls:127.0.0.1:3022"},
                link_listener="",
                version=VersionInfo("v1.6.0", "bench", "2026-01-01", "linux", "amd64"),
                tunneler=False,
            )
        return len(routers)

    def findings(self, runs: int) -> tuple[float, int, dict[str, tuple[float, float]]]:
        """The first read of the findings (seconds, how many), then per run: a service policy
        naming an attribute nobody carries is created (a dangling-role finding), read, and fixed;
        the time from the fix's commit until ``GET /findings/{id}`` answers RESOLVED, and one
        evaluation on its own."""
        from engine.analysis.findings import PATHS, finding_id
        from engine.policy import IDENTITY, SERVICE_POLICY

        findings = self.analysis_findings()
        assert findings is not None
        started = time.perf_counter()
        first = self.client.simulate_get("/analysis/v1/findings", params={"limit": 1}, headers=self.headers)
        assert first.status_code == 200, first.text
        first_seconds = time.perf_counter() - started
        count = first.json["meta"]["pagination"]["totalCount"]
        manager = self.managers.service_policies
        service = self.services[0]
        made: list[str] = []
        resolved: list[float] = []

        def status(finding: str) -> str:
            answer = self.client.simulate_get(f"/analysis/v1/findings/{finding}", headers=self.headers)
            assert answer.status_code == 200, answer.text
            return str(answer.json["data"]["status"])

        def fix(n: int) -> None:
            role = f"#bench-dangling-{n + 100}"
            policy = manager.create(
                {
                    "name": f"bench-finding-{n + 100}",
                    "type": "Dial",
                    "semantic": "AnyOf",
                    "identity_roles": [role],
                    "service_roles": [f"@{service}"],
                }
            )
            made.append(policy.id)
            finding = finding_id("dangling-role", PATHS[SERVICE_POLICY], policy.id, f"{IDENTITY}:{role}")
            assert status(finding) == "ACTIVE"
            manager.update(policy.id, {"identity_roles": ["#all"]})
            fixed = time.perf_counter()
            while status(finding) != "RESOLVED":
                assert time.perf_counter() - fixed < 60, "the finding was not resolved"
            resolved.append((time.perf_counter() - fixed) * 1e3)

        _time(fix, runs, warmup=1)
        out = {"fixed, until GET shows it RESOLVED": _percentiles(resolved[1:])}
        out["one evaluation"] = _percentiles(_time(lambda n: findings.refresh(force=True), runs, warmup=1))
        for policy_id in made:
            manager.delete(policy_id)
        return first_seconds, count, out

    def analysis_findings(self) -> Any:
        from api.analysis_findings import findings_manager

        return findings_manager(self.analysis)


def run(
    tier: str,
    seed: int = 1,
    runs: int = 200,
    what_if_runs: int = 30,
    all_runs: int = 5,
    finding_runs: int = 10,
    offline: bool = False,
) -> str:
    with tempfile.TemporaryDirectory(prefix="trellis-bench-analysis-") as tmp:
        bench = Bench(tier, seed, Path(tmp) / "home")
        try:
            rows: list[tuple[str, str, tuple[float, float]]] = []
            for path, figures in bench.explain(runs).items():
                rows.append(("explain (Dial)", path, figures))
            for path, figures in bench.what_if(what_if_runs).items():
                rows.append(("what-if, one policy edit", path, figures))
            edits, pairs, all_figures = bench.what_if_all(all_runs)
            for path, figures in all_figures.items():
                rows.append(
                    (f"what-if, `#all` edit of {edits} policies adding {pairs:,} pairs", path, figures)
                )
            for how, figures in bench.writes(runs).items():
                rows.append((f"service policy write, {how}", "in-process", figures))
            if not offline:
                online = bench.routers_online()
            first, found, finding_figures = bench.findings(finding_runs)
            state = "no router online" if offline else f"{online:,} routers online"
            rows.append(
                (f"findings, first read ({found:,} findings, {state})", "wsgi", (first * 1e3, first * 1e3))
            )
            for how, figures in finding_figures.items():
                rows.append((f"findings, {how}", "wsgi" if "GET" in how else "in-process", figures))
            load = bench.load_seconds
        finally:
            bench.close()
    lines = [
        f"tier {tier} (seed {seed}): network loaded and controller built in {load:.1f} s",
        "",
        "| operation | path | p50 ms | p99 ms |",
        "| --- | --- | --- | --- |",
    ]
    lines.extend(f"| {what} | {path} | {p50:.3f} | {p99:.3f} |" for what, path, (p50, p99) in rows)
    return "\n".join(lines)


def main(args: argparse.Namespace) -> str:
    return run(
        args.tier, args.seed, args.runs, args.what_if_runs, args.all_runs, args.finding_runs, args.offline
    )
