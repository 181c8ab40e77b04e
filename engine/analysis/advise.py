"""Policy advice for the whole network in one pass (docs/analysis.md §7, ``trellis advise``).

OpenZiti's ``ziti edge policy-advisor identities|services`` asks the controller for the policy
advice of every (identity, service) pair the identity may Dial or Bind, one HTTP call per pair,
and prints a line per pair::

    STATUS: IDENTITY (ID ROUTERS) -> SERVICE (SVC ROUTERS) Common Routers: (ONLINE/COMMON) Dial: Y Bind: N

``STATUS`` is ``ERROR`` when the pair has neither permission, the identity or the service has no
edge router, they have none in common, or every common one is offline; identities that may use no
service and services no identity may use get an ``ERROR`` line of their own. Its advice ignores
posture and disabled identities, so it answers OKAY for pairs that cannot connect.

:func:`advise` gives the same rows (with the same status wherever that is right) from the policy
graph directly, and adds what OpenZiti leaves out: the names of the granting policies per type,
their posture checks (and, given the identities' posture data, whether one granting policy
passes), and whether the identity is disabled (``problems``). :func:`service_summaries` gives one
row per service, computed on bitsets without visiting pairs, for networks whose pairs are too
many to print (tier L: over 160 million).

:class:`Bits` reads the graph's bitsets (its private representation) for these whole-network
passes and for the findings (``engine.analysis.findings``); it never changes the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.policy import (
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    PolicyGraph,
)
from engine.policy.bitset import select, slots

__all__ = [
    "AdviceRow",
    "Bits",
    "ServiceSummary",
    "advise",
    "service_summaries",
]

Names = Callable[[str, str], str]
"""(engine kind, id) -> its name (or the id)."""

NO_ACCESS = "No access to service. Adjust service policies."
NO_IDENTITY_ROUTERS = "Identity has no edge routers assigned. Adjust edge router policies."
NO_SERVICE_ROUTERS = "Service has no edge routers assigned. Adjust service edge router policies."
NO_COMMON = (
    "Identity and services have no edge routers in common. Adjust edge router policies and/or "
    "service edge router policies."
)
ALL_OFFLINE = (
    "Common edge routers are all off-line. Bring routers back on-line or adjust edge router "
    "policies and/or service edge router policies to increase common router pool."
)
IDENTITY_NO_SERVICES = "Identity does not have access to any services. Adjust service policies."
SERVICE_NO_IDENTITIES = "Service is not accessible by any identities. Adjust service policies."
#: The problem a row names beside the errors.
DISABLED = "identity is disabled"


class Bits:
    """Whole-network bitset reads of one graph (not to be used after the graph changes)."""

    def __init__(self, graph: PolicyGraph) -> None:
        self.graph = graph
        g: Any = graph  # the graph's private representation, read only
        self.identities = g._identities
        self.services = g._services
        self.routers = g._routers
        self.sp_identity = g._sp_identity
        self.sp_service = g._sp_service
        self.sp_posture = g._sp_posture
        self.erp_identity = g._erp_identity
        self.erp_router = g._erp_router
        self.serp_service = g._serp_service
        self.serp_router = g._serp_router
        self.dial: int = g._dial
        self.bind: int = g._bind
        self.policy_tables = g._policies
        self.sides = g._sides
        self.identity_cache = g._identity_cache
        self.service_cache = g._service_cache
        self._reach: dict[int, int] = {}

    def policy_slots(self, kind: str) -> dict[str, int]:
        """Policy id -> slot."""
        return dict(self.policy_tables[kind].slot_of)

    def policy_id(self, kind: str, slot: int) -> str:
        return str(self.policy_tables[kind].ids[slot])

    def ids(self, table: Any, bits: int) -> list[str]:
        return sorted(select(bits, table.ids))

    def identity_routers(self, identity_id: str) -> int:
        return int(self.identity_cache.get(identity_id)[2])

    def service_routers(self, service_id: str) -> int:
        return int(self.service_cache.get(service_id)[2])

    def service_policies_of(self, service_id: str) -> int:
        """The service policy slots selecting the service."""
        return int(self.sp_service.effective_links(self.services.slot_of[service_id]))

    def identities_reaching(self, routers: int) -> int:
        """The identities an edge router policy gives at least one of ``routers`` (memoised)."""
        known = self._reach.get(routers)
        if known is None:
            policies = 0
            links = self.erp_router.effective_links
            for router in slots(routers):
                policies |= links(router)
            known = self.erp_identity.union_of_members(policies) if policies else 0
            self._reach[routers] = known
        return known

    def identities_with_routers(self) -> int:
        """The identities some edge router policy selects (with routers or not)."""
        return self._selected(self.erp_identity, EDGE_ROUTER_POLICY)

    def services_with_routers(self) -> int:
        """The services some service edge router policy selects."""
        return self._selected(self.serp_service, SERVICE_EDGE_ROUTER_POLICY)

    def _selected(self, side: Any, kind: str) -> int:
        table = self.policy_tables[kind]
        live = 0
        for slot, policy_id in enumerate(table.ids):
            if policy_id is not None:
                live |= 1 << slot
        return int(side.union_of_members(live)) if live else 0

    def checks_of(self, policy_slot: int) -> list[str]:
        """The posture check ids of a service policy."""
        return self.ids(self.sp_posture.table, self.sp_posture.member_bits(policy_slot))


@dataclass(frozen=True)
class AdviceRow:
    """One (identity, service) pair the identity may Dial or Bind (or, with ``service_id`` None,
    an identity that may use no service; with ``identity_id`` None, a service no one may use)."""

    status: str
    identity_id: str | None
    identity_name: str
    service_id: str | None
    service_name: str
    identity_router_count: int = 0
    service_router_count: int = 0
    common_router_count: int = 0
    #: None: not known (offline, from a snapshot).
    online_common_router_count: int | None = None
    dial: bool = False
    bind: bool = False
    #: OpenZiti's error details.
    errors: tuple[str, ...] = ()
    dial_policies: tuple[str, ...] = ()
    bind_policies: tuple[str, ...] = ()
    #: Per granting policy name: its posture check names (only those with checks).
    posture: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: What stops the pair beyond OpenZiti's checks (posture failing, identity disabled).
    problems: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """The row as ``ziti edge policy-advisor`` prints it."""
        if self.service_id is None or self.identity_id is None:
            detail = "".join(f"\n  - {e}" for e in self.errors)
            name = self.identity_name if self.service_id is None else self.service_name
            return f"ERROR: {name} {detail}\n"
        online = "?" if self.online_common_router_count is None else self.online_common_router_count
        detail = "".join(f"\n  - {e}" for e in self.errors)
        return (
            f"{self.status}: {self.identity_name} ({self.identity_router_count}) -> {self.service_name} "
            f"({self.service_router_count}) Common Routers: ({online}/{self.common_router_count}) "
            f"Dial: {'Y' if self.dial else 'N'} Bind: {'Y' if self.bind else 'N'} {detail}\n"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "identityId": self.identity_id,
            "identityName": self.identity_name,
            "serviceId": self.service_id,
            "serviceName": self.service_name,
            "identityRouterCount": self.identity_router_count,
            "serviceRouterCount": self.service_router_count,
            "commonRouterCount": self.common_router_count,
            "onlineCommonRouterCount": self.online_common_router_count,
            "dial": self.dial,
            "bind": self.bind,
            "errors": list(self.errors),
            "dialPolicies": list(self.dial_policies),
            "bindPolicies": list(self.bind_policies),
            "posture": {k: list(v) for k, v in self.posture.items()},
            "problems": list(self.problems),
        }


def _ids_name(kind: str, entity_id: str) -> str:
    return entity_id


def advise(
    graph: PolicyGraph,
    *,
    online: Callable[[str], bool] | None = None,
    names: Names = _ids_name,
    posture: Callable[[str, Sequence[str]], Mapping[str, bool]] | None = None,
    disabled: Callable[[str], bool] = lambda _: False,
    order: str = "identities",
    errors_only: bool = False,
) -> Iterator[AdviceRow]:
    """Every pair's advice, identity by identity (``order="identities"``, as ``policy-advisor
    identities``) or service by service (``"services"``), streamed.

    ``online`` tells whether a router is online (None: not known, offline analysis: the online
    count is None and only "no common router" is an error). ``posture(identity, check_ids)``
    answers each check's verdict for the identity (None: posture is not evaluated). With
    ``errors_only`` only the rows whose status is ERROR or that have problems are given.
    """
    bits = Bits(graph)
    router_ids = bits.routers.ids
    online_bits = 0
    if online is not None:
        for slot, router_id in enumerate(router_ids):
            if router_id is not None and online(router_id):
                online_bits |= 1 << slot
    sp_ids = bits.policy_tables[SERVICE_POLICY].ids
    policy_names: dict[int, str] = {}
    check_names: dict[str, str] = {}

    def policy_name(slot: int) -> str:
        name = policy_names.get(slot)
        if name is None:
            name = policy_names[slot] = names(SERVICE_POLICY, str(sp_ids[slot]))
        return name

    def check_name(check_id: str) -> str:
        name = check_names.get(check_id)
        if name is None:
            name = check_names[check_id] = names(POSTURE_CHECK, check_id)
        return name

    identity_links = bits.sp_identity
    service_links = bits.sp_service
    any_checks = bool(bits.sp_posture.table.all_bits)

    def row(identity_id: str, identity_name: str, service_id: str, service_name: str) -> AdviceRow | None:
        i_slot = bits.identities.slot_of[identity_id]
        s_slot = bits.services.slot_of[service_id]
        policies = identity_links.effective_links(i_slot) & service_links.effective_links(s_slot)
        dial_bits, bind_bits = policies & bits.dial, policies & bits.bind
        mine = bits.identity_routers(identity_id)
        theirs = bits.service_routers(service_id)
        common = mine & theirs
        errors: list[str] = []
        if not (dial_bits or bind_bits):
            errors.append(NO_ACCESS)
        if not mine:
            errors.append(NO_IDENTITY_ROUTERS)
        if not theirs:
            errors.append(NO_SERVICE_ROUTERS)
        online_count: int | None = None
        if online is not None:
            online_count = (common & online_bits).bit_count()
        if mine and theirs:
            if not common:
                errors.append(NO_COMMON)
            elif online_count == 0:
                errors.append(ALL_OFFLINE)
        problems: list[str] = []
        posture_map: dict[str, tuple[str, ...]] = {}
        for kind_bits, kind in ((dial_bits, "Dial"), (bind_bits, "Bind")):
            if not kind_bits:
                continue
            passing = False
            for slot in slots(kind_bits):
                checks = bits.checks_of(slot) if any_checks else []
                if checks:
                    posture_map[policy_name(slot)] = tuple(check_name(c) for c in checks)
                if not checks or not any_checks:
                    passing = True
                elif posture is not None:
                    verdicts = posture(identity_id, checks)
                    if all(verdicts.get(c, False) for c in checks):
                        passing = True
            if posture is not None and not passing:
                problems.append(f"posture fails for every policy granting {kind}")
        if disabled(identity_id):
            problems.append(DISABLED)
        status = "ERROR" if errors else "OKAY "
        if errors_only and not errors and not problems:
            return None
        return AdviceRow(
            status=status.strip(),
            identity_id=identity_id,
            identity_name=identity_name,
            service_id=service_id,
            service_name=service_name,
            identity_router_count=mine.bit_count(),
            service_router_count=theirs.bit_count(),
            common_router_count=common.bit_count(),
            online_common_router_count=online_count,
            dial=bool(dial_bits),
            bind=bool(bind_bits),
            errors=tuple(errors),
            dial_policies=tuple(sorted(policy_name(s) for s in slots(dial_bits))),
            bind_policies=tuple(sorted(policy_name(s) for s in slots(bind_bits))),
            posture=posture_map,
            problems=tuple(problems),
        )

    identity_name_of: dict[str, str] = {}

    def identity_name(identity_id: str) -> str:
        name = identity_name_of.get(identity_id)
        if name is None:
            name = identity_name_of[identity_id] = names(IDENTITY, identity_id)
        return name

    granted = bits.dial | bits.bind
    if order == "services":
        for service_id in sorted(bits.services.slot_of, key=lambda s: (names(SERVICE, s), s)):
            service_name = names(SERVICE, service_id)
            policies = bits.service_policies_of(service_id) & granted
            members = identity_links.union_of_members(policies) if policies else 0
            found = False
            for identity_id in sorted(
                select(members, bits.identities.ids), key=lambda i: (identity_name(i), i)
            ):
                found = True
                answer = row(identity_id, identity_name(identity_id), service_id, service_name)
                if answer is not None:
                    yield answer
            if not found:
                yield AdviceRow("ERROR", None, "", service_id, service_name, errors=(SERVICE_NO_IDENTITIES,))
        return
    service_name_of = {s: names(SERVICE, s) for s in bits.services.slot_of}
    for identity_id in sorted(bits.identities.slot_of, key=lambda i: (identity_name(i), i)):
        policies = identity_links.effective_links(bits.identities.slot_of[identity_id]) & granted
        members = service_links.union_of_members(policies) if policies else 0
        name = identity_name(identity_id)
        found = False
        for service_id in sorted(select(members, bits.services.ids), key=lambda s: (service_name_of[s], s)):
            found = True
            answer = row(identity_id, name, service_id, service_name_of[service_id])
            if answer is not None:
                yield answer
        if not found:
            yield AdviceRow("ERROR", identity_id, name, None, "", errors=(IDENTITY_NO_SERVICES,))


@dataclass(frozen=True)
class ServiceSummary:
    """One service's advice over every identity, counted on bitsets (no pair visited)."""

    service_id: str
    service_name: str
    service_router_count: int
    dial_identities: int
    bind_identities: int
    #: Granted identities (either type) by outcome.
    ok: int
    no_identity_routers: int
    no_common_router: int
    #: None when online status is not known.
    all_offline: int | None
    dial_policies: tuple[str, ...]
    bind_policies: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "serviceId": self.service_id,
            "serviceName": self.service_name,
            "serviceRouterCount": self.service_router_count,
            "dialIdentities": self.dial_identities,
            "bindIdentities": self.bind_identities,
            "ok": self.ok,
            "noIdentityRouters": self.no_identity_routers,
            "noCommonRouter": self.no_common_router,
            "allOffline": self.all_offline,
            "dialPolicies": list(self.dial_policies),
            "bindPolicies": list(self.bind_policies),
        }


def service_summaries(
    graph: PolicyGraph, *, online: Callable[[str], bool] | None = None, names: Names = _ids_name
) -> Iterator[ServiceSummary]:
    """Per service: how many identities may Dial / Bind it and how many of those pairs are OKAY,
    lack identity routers, share no router, or share only offline ones (ziti's checks, counted)."""
    bits = Bits(graph)
    online_bits = 0
    if online is not None:
        for slot, router_id in enumerate(bits.routers.ids):
            if router_id is not None and online(router_id):
                online_bits |= 1 << slot
    with_routers = bits.identities_with_routers()
    routed = 0
    for identity_slot in slots(with_routers):
        identity_id = bits.identities.ids[identity_slot]
        if identity_id is not None and bits.identity_routers(identity_id):
            routed |= 1 << identity_slot
    sp_ids = bits.policy_tables[SERVICE_POLICY].ids
    for service_id in sorted(bits.services.slot_of, key=lambda s: (names(SERVICE, s), s)):
        policies = bits.service_policies_of(service_id)
        dial = bits.sp_identity.union_of_members(policies & bits.dial) if policies & bits.dial else 0
        bind = bits.sp_identity.union_of_members(policies & bits.bind) if policies & bits.bind else 0
        granted = dial | bind
        theirs = bits.service_routers(service_id)
        reach = bits.identities_reaching(theirs) if theirs else 0
        if online is not None:
            live = theirs & online_bits
            reach_online = bits.identities_reaching(live) if live else 0
            ok = (granted & reach_online).bit_count()
            offline: int | None = (granted & reach & ~reach_online).bit_count()
        else:
            ok = (granted & reach).bit_count()
            offline = None
        yield ServiceSummary(
            service_id=service_id,
            service_name=names(SERVICE, service_id),
            service_router_count=theirs.bit_count(),
            dial_identities=dial.bit_count(),
            bind_identities=bind.bit_count(),
            ok=ok,
            no_identity_routers=(granted & ~routed).bit_count(),
            no_common_router=(granted & routed & ~reach).bit_count(),
            all_offline=offline,
            dial_policies=tuple(
                sorted(names(SERVICE_POLICY, str(sp_ids[s])) for s in slots(policies & bits.dial))
            ),
            bind_policies=tuple(
                sorted(names(SERVICE_POLICY, str(sp_ids[s])) for s in slots(policies & bits.bind))
            ),
        )
