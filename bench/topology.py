"""Seeded synthetic topologies for the policy engine benchmarks.

Tiers (entities / policies):

====  ==========  ========  ============  =======  ======  =====  ======
tier  identities  services  edge routers  posture  SP      ERP    SERP
====  ==========  ========  ============  =======  ======  =====  ======
S     1,000       100       10            10       50      10     10
M     10,000      1,000     100           30       500     100    100
L     100,000     10,000    1,000         100      5,000   1,000  1,000
XL    1,000,000   50,000    5,000         200      14,000  3,000  3,000
====  ==========  ========  ============  =======  ======  =====  ======

XL's 20k policies are split 70/15/15 like L's. Posture check counts are not given by the issue and
are chosen small (they only feed ``postureCheckRoles``).

Shape, per entity kind with its own pool of 500 attribute names (posture checks: 50):

- every identity, service and edge router carries 1-5 attributes drawn uniformly from the pool;
- every policy side (role field) is, in order of likelihood:
  1-5 ``#attributes`` (1 most often, see ``_ROLE_COUNTS``) drawn from the pool, 10% of them with 1-3
  ``@ids`` added; 3% only ``@ids``; a small share ``#all`` (``_ALL``, per side);
- half of the policies are AnyOf, half AllOf; service policies are 80% Dial, 20% Bind; 20% of service
  policies carry posture check roles.

With these numbers an identity at tier L may Dial about a fifth of the services, the same order
as the measurement in ``docs/architecture.md`` §4 (164M identity -> service Dial pairs). Ids are random
10-character strings, like OpenZiti's short ids.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.policy import EntityRow, PolicyRow

__all__ = ["TIERS", "Tier", "Topology", "generate"]


@dataclass(frozen=True)
class Tier:
    """Population sizes of one benchmark tier."""

    name: str
    identities: int
    services: int
    edge_routers: int
    posture_checks: int
    service_policies: int
    edge_router_policies: int
    service_edge_router_policies: int
    attributes: int = 500


TIERS: dict[str, Tier] = {
    "S": Tier("S", 1_000, 100, 10, 10, 50, 10, 10),
    "M": Tier("M", 10_000, 1_000, 100, 30, 500, 100, 100),
    "L": Tier("L", 100_000, 10_000, 1_000, 100, 5_000, 1_000, 1_000),
    "XL": Tier("XL", 1_000_000, 50_000, 5_000, 200, 14_000, 3_000, 3_000),
}

_ROLE_COUNTS = (1,) * 14 + (2,) * 3 + (3, 4, 5)
"""Attributes per policy side: 70% one, 15% two, 5% each three to five."""
_ALL = {"identity": 0.001, "service": 0.001, "edge-router": 0.01, "posture-check": 0.0}
"""Share of policy sides that are ``#all``, by the kind they select."""
_ID_CHARS = string.ascii_letters + string.digits


@dataclass(frozen=True)
class Topology:
    """A generated population, as rows for :meth:`engine.policy.PolicyGraph.build`."""

    tier: Tier
    seed: int
    identities: list[EntityRow]
    services: list[EntityRow]
    edge_routers: list[EntityRow]
    posture_checks: list[EntityRow]
    service_policies: list[PolicyRow]
    edge_router_policies: list[PolicyRow]
    service_edge_router_policies: list[PolicyRow]

    def rows(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`engine.policy.PolicyGraph.build`."""
        return {
            "identities": self.identities,
            "services": self.services,
            "edge_routers": self.edge_routers,
            "posture_checks": self.posture_checks,
            "service_policies": self.service_policies,
            "edge_router_policies": self.edge_router_policies,
            "service_edge_router_policies": self.service_edge_router_policies,
        }

    def with_identities(self, identities: list[EntityRow]) -> Topology:
        """The same topology over another identity population (``@id`` roles are kept as they are)."""
        return Topology(
            self.tier,
            self.seed,
            identities,
            self.services,
            self.edge_routers,
            self.posture_checks,
            self.service_policies,
            self.edge_router_policies,
            self.service_edge_router_policies,
        )


class _Generator:
    def __init__(self, tier: Tier, seed: int) -> None:
        self.tier = tier
        self.rng = random.Random(seed)
        self.seen: set[str] = set()

    def new_id(self) -> str:
        rng = self.rng
        while True:
            candidate = "".join(rng.choices(_ID_CHARS, k=10))
            if candidate not in self.seen:
                self.seen.add(candidate)
                return candidate

    def entities(self, count: int, pool: Sequence[str], most: int = 5) -> list[EntityRow]:
        rng = self.rng
        return [EntityRow(self.new_id(), tuple(rng.sample(pool, rng.randint(1, most)))) for _ in range(count)]

    def side(self, kind: str, pool: Sequence[str], entities: Sequence[EntityRow]) -> tuple[str, ...]:
        rng = self.rng
        roll = rng.random()
        if roll < _ALL[kind]:
            return ("#all",)
        if roll < _ALL[kind] + 0.03 or not pool:
            return tuple(f"@{rng.choice(entities).id}" for _ in range(rng.randint(1, 3)))
        roles = [f"#{a}" for a in rng.sample(pool, rng.choice(_ROLE_COUNTS))]
        if rng.random() < 0.1:
            roles.extend(f"@{rng.choice(entities).id}" for _ in range(rng.randint(1, 3)))
        return tuple(roles)

    def semantic(self) -> str:
        return "AnyOf" if self.rng.random() < 0.5 else "AllOf"


def _pool(prefix: str, size: int) -> list[str]:
    return [f"{prefix}{n:03d}" for n in range(size)]


def generate(tier: Tier | str, seed: int = 1) -> Topology:
    """A deterministic topology for ``tier`` (a :class:`Tier` or a key of :data:`TIERS`)."""
    if isinstance(tier, str):
        tier = TIERS[tier]
    g = _Generator(tier, seed)
    rng = g.rng
    identity_pool = _pool("team-", tier.attributes)
    service_pool = _pool("app-", tier.attributes)
    router_pool = _pool("region-", tier.attributes)
    posture_pool = _pool("check-", 50)
    identities = g.entities(tier.identities, identity_pool)
    services = g.entities(tier.services, service_pool)
    routers = g.entities(tier.edge_routers, router_pool)
    postures = g.entities(tier.posture_checks, posture_pool, most=3)
    service_policies = []
    for _ in range(tier.service_policies):
        posture: tuple[str, ...] = ()
        if postures and rng.random() < 0.2:
            posture = g.side("posture-check", posture_pool, postures)
        service_policies.append(
            PolicyRow(
                g.new_id(),
                g.semantic(),
                "Dial" if rng.random() < 0.8 else "Bind",
                identity_roles=g.side("identity", identity_pool, identities),
                service_roles=g.side("service", service_pool, services),
                posture_check_roles=posture,
            )
        )
    edge_router_policies = [
        PolicyRow(
            g.new_id(),
            g.semantic(),
            identity_roles=g.side("identity", identity_pool, identities),
            edge_router_roles=g.side("edge-router", router_pool, routers),
        )
        for _ in range(tier.edge_router_policies)
    ]
    service_edge_router_policies = [
        PolicyRow(
            g.new_id(),
            g.semantic(),
            service_roles=g.side("service", service_pool, services),
            edge_router_roles=g.side("edge-router", router_pool, routers),
        )
        for _ in range(tier.service_edge_router_policies)
    ]
    return Topology(
        tier,
        seed,
        identities,
        services,
        routers,
        postures,
        service_policies,
        edge_router_policies,
        service_edge_router_policies,
    )
