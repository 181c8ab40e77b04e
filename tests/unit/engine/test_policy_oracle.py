"""The policy engine against a brute-force oracle (docs/policy.md §1.2, §3, §4, §9 S6).

A hypothesis state machine drives random sequences of entity and policy creates, attribute changes,
role / semantic / type changes and deletes over small universes (at most 12 entities per kind, 6
policies per kind, attributes from a small alphabet, roles with ``#all``, ``@id`` of existing and
missing entities, AllOf/AnyOf and odd casings). After every step every query of
:class:`engine.policy.PolicyGraph` must equal the oracle, which evaluates the §1.2 predicate on the
raw role lists for every entity, with no index and no incremental state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POLICY_FIELDS,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    EntityRow,
    PolicyGraph,
    PolicyRow,
    UnknownEntityError,
    UnknownPolicyError,
)
from engine.policy.sides import Side
from tests.conftest import examples

ENTITY_POOLS: dict[str, list[str]] = {
    IDENTITY: [f"i{n}" for n in range(12)],
    SERVICE: [f"s{n}" for n in range(10)],
    EDGE_ROUTER: [f"r{n}" for n in range(8)],
    POSTURE_CHECK: [f"pc{n}" for n in range(5)],
}
POLICY_POOL = [f"p{n}" for n in range(6)]
ALPHABET = ["a", "b", "c", "d", "all", ""]
COMMON = ["a", "b", "c"]
SEMANTICS = ["AllOf", "AnyOf", "allof", "ANYOF", "AllOf", "AnyOf", "Nonsense"]
TYPES = ["Dial", "Bind", "dial", "BIND"]
FIELD = {IDENTITY: "identity_roles", SERVICE: "service_roles", EDGE_ROUTER: "edge_router_roles"}
FIELD[POSTURE_CHECK] = "posture_check_roles"


# -- the oracle: the definitions, evaluated directly --------------------------------------------


def selects(roles: list[str], semantic: str, entity_id: str, attributes: set[str]) -> bool:
    """docs/policy.md §1.2, word for word."""
    role_attributes = [r[1:] for r in roles if r.startswith("#")]
    ids = [r[1:] for r in roles if r.startswith("@")]
    if entity_id in ids:
        return True
    if "all" in role_attributes:
        return True
    if semantic.lower() == "allof" and len(role_attributes) > 0:
        return all(r in attributes for r in role_attributes)
    if semantic.lower() == "anyof" and len(role_attributes) > 0:
        return any(r in attributes for r in role_attributes)
    return False


@dataclass
class OraclePolicy:
    semantic: str
    type: str | None
    roles: dict[str, list[str]]


@dataclass
class Oracle:
    entities: dict[str, dict[str, set[str]]] = field(
        default_factory=lambda: {kind: {} for kind in ENTITY_POOLS}
    )
    policies: dict[str, dict[str, OraclePolicy]] = field(
        default_factory=lambda: {kind: {} for kind in POLICY_FIELDS}
    )
    memo: dict[tuple[str, str, str], set[str]] = field(default_factory=dict)
    """Member sets within one :func:`check_all` (cleared at its start; the state is not mutated there)."""

    def copy(self) -> Oracle:
        return Oracle(
            {kind: {e: set(a) for e, a in ents.items()} for kind, ents in self.entities.items()},
            {
                kind: {p: OraclePolicy(v.semantic, v.type, dict(v.roles)) for p, v in pols.items()}
                for kind, pols in self.policies.items()
            },
        )

    def members(self, policy_kind: str, policy_id: str, entity_kind: str) -> set[str]:
        key = (policy_kind, policy_id, entity_kind)
        if key not in self.memo:
            self.memo[key] = self._members(policy_kind, policy_id, entity_kind)
        return self.memo[key]

    def _members(self, policy_kind: str, policy_id: str, entity_kind: str) -> set[str]:
        policy = self.policies[policy_kind][policy_id]
        return {
            e
            for e, attributes in self.entities[entity_kind].items()
            if selects(policy.roles.get(entity_kind, []), policy.semantic, e, attributes)
        }

    def policies_for(self, entity_kind: str, entity_id: str, policy_kind: str) -> set[str]:
        return {
            p for p in self.policies[policy_kind] if entity_id in self.members(policy_kind, p, entity_kind)
        }

    def linking(self, identity: str, service: str, policy_type: str | None) -> set[str]:
        return {
            p
            for p, policy in self.policies[SERVICE_POLICY].items()
            if (policy_type is None or policy.type == policy_type)
            and identity in self.members(SERVICE_POLICY, p, IDENTITY)
            and service in self.members(SERVICE_POLICY, p, SERVICE)
        }

    def linked(
        self, policy_kind: str, kind_a: str, a: str, kind_b: str, policy_type: str | None = None
    ) -> set[str]:
        result: set[str] = set()
        for p, policy in self.policies[policy_kind].items():
            if policy_type is not None and policy.type != policy_type:
                continue
            if a in self.members(policy_kind, p, kind_a):
                result |= self.members(policy_kind, p, kind_b)
        return result


def canonical_type(value: str) -> str:
    return "Dial" if value.lower() == "dial" else "Bind"


# -- comparing every query ------------------------------------------------------------------------


def check_all(graph: PolicyGraph, oracle: Oracle) -> None:
    """Every query of the graph equals the oracle."""
    oracle.memo.clear()
    ents = oracle.entities
    for kind, pool in ENTITY_POOLS.items():
        assert graph.entity_ids(kind) == sorted(ents[kind])  # type: ignore[arg-type]
        for entity_id in pool:
            assert graph.has_entity(kind, entity_id) == (entity_id in ents[kind])  # type: ignore[arg-type]
    for policy_kind, entity_kinds in POLICY_FIELDS.items():
        assert graph.policy_ids(policy_kind) == sorted(oracle.policies[policy_kind])
        for policy_id in oracle.policies[policy_kind]:
            for entity_kind in entity_kinds:
                expected = sorted(oracle.members(policy_kind, policy_id, entity_kind))
                assert graph.policy_members(policy_kind, policy_id, entity_kind) == expected, (
                    policy_kind,
                    policy_id,
                    entity_kind,
                )
            for entity_kind in entity_kinds:
                for entity_id in ents[entity_kind]:
                    expected = sorted(oracle.policies_for(entity_kind, entity_id, policy_kind))
                    assert graph.policies_for_entity(entity_kind, entity_id, policy_kind) == expected
    for identity in ents[IDENTITY]:
        for policy_type in (None, "Dial", "Bind"):
            expected = sorted(oracle.linked(SERVICE_POLICY, IDENTITY, identity, SERVICE, policy_type))
            assert graph.services_for_identity(identity, policy_type) == expected
        assert graph.edge_routers_for_identity(identity) == sorted(
            oracle.linked(EDGE_ROUTER_POLICY, IDENTITY, identity, EDGE_ROUTER)
        )
    for service in ents[SERVICE]:
        for policy_type in (None, "Dial", "Bind"):
            expected = sorted(oracle.linked(SERVICE_POLICY, SERVICE, service, IDENTITY, policy_type))
            assert graph.identities_for_service(service, policy_type) == expected
        assert graph.edge_routers_for_service(service) == sorted(
            oracle.linked(SERVICE_EDGE_ROUTER_POLICY, SERVICE, service, EDGE_ROUTER)
        )
    gated = {
        service
        for p in oracle.policies[SERVICE_POLICY]
        if oracle.members(SERVICE_POLICY, p, POSTURE_CHECK)
        for service in oracle.members(SERVICE_POLICY, p, SERVICE)
    }
    assert graph.posture_gated_services() == sorted(gated)
    for router in ents[EDGE_ROUTER]:
        assert graph.identities_for_edge_router(router) == sorted(
            oracle.linked(EDGE_ROUTER_POLICY, EDGE_ROUTER, router, IDENTITY)
        )
        assert graph.services_for_edge_router(router) == sorted(
            oracle.linked(SERVICE_EDGE_ROUTER_POLICY, EDGE_ROUTER, router, SERVICE)
        )
    for policy_kind, (kind_a, kind_b) in (
        (EDGE_ROUTER_POLICY, (IDENTITY, EDGE_ROUTER)),
        (SERVICE_EDGE_ROUTER_POLICY, (SERVICE, EDGE_ROUTER)),
    ):
        provenance = (
            graph.edge_router_link_policies
            if policy_kind == EDGE_ROUTER_POLICY
            else graph.service_edge_router_link_policies
        )
        for a, b in product(ents[kind_a], ents[kind_b]):
            expected = sorted(
                p
                for p in oracle.policies[policy_kind]
                if a in oracle.members(policy_kind, p, kind_a) and b in oracle.members(policy_kind, p, kind_b)
            )
            assert provenance(a, b) == expected
    for identity, service in product(ents[IDENTITY], ents[SERVICE]):
        dial = oracle.linking(identity, service, "Dial")
        bind = oracle.linking(identity, service, "Bind")
        assert graph.permissions(identity, service) == {t for t, ps in (("Dial", dial), ("Bind", bind)) if ps}
        assert graph.link_policies(identity, service, "Dial") == sorted(dial)
        assert graph.link_policies(identity, service, "Bind") == sorted(bind)
        assert graph.link_policies(identity, service) == sorted(dial | bind)
        advice = graph.advice(identity, service)
        identity_routers = oracle.linked(EDGE_ROUTER_POLICY, IDENTITY, identity, EDGE_ROUTER)
        service_routers = oracle.linked(SERVICE_EDGE_ROUTER_POLICY, SERVICE, service, EDGE_ROUTER)
        assert advice.is_dial_allowed == bool(dial)
        assert advice.is_bind_allowed == bool(bind)
        assert advice.identity_router_ids == tuple(sorted(identity_routers))
        assert advice.service_router_ids == tuple(sorted(service_routers))
        assert advice.common_router_ids == tuple(sorted(identity_routers & service_routers))
        assert advice.identity_router_count == len(identity_routers)
        assert advice.service_router_count == len(service_routers)
        for policy_type, granting in (("Dial", dial), ("Bind", bind)):
            expected_checks = {
                p: tuple(sorted(oracle.members(SERVICE_POLICY, p, POSTURE_CHECK))) for p in sorted(granting)
            }
            assert graph.posture_checks_for(identity, service, policy_type) == expected_checks
        # The memoised pair answer (filled at the previous step, so a stale one is caught here).
        expected_posture = {
            p: (
                "Dial" if p in dial else "Bind",
                tuple(sorted(oracle.members(SERVICE_POLICY, p, POSTURE_CHECK))),
            )
            for p in sorted(dial | bind)
        }
        permissions = tuple(t for t, ps in (("Bind", bind), ("Dial", dial)) if ps)
        assert graph.grant(identity, service) == (permissions, expected_posture)


# -- strategies -------------------------------------------------------------------------------------


def role_lists(entity_kind: str) -> st.SearchStrategy[list[str]]:
    entry = st.one_of(
        st.sampled_from([f"#{a}" for a in COMMON]),
        st.sampled_from([f"#{a}" for a in ALPHABET]),
        st.sampled_from([f"@{e}" for e in ENTITY_POOLS[entity_kind]]),
    )
    return st.one_of(
        st.just(["#all"]),
        st.lists(entry, max_size=4),
        st.lists(entry, min_size=1, max_size=3),
        st.lists(entry, max_size=2).map(lambda roles: ["#all", *roles]),
    )


attribute_sets = st.one_of(
    st.lists(st.sampled_from(COMMON), max_size=3),
    st.lists(st.sampled_from(ALPHABET), max_size=4),
)


@st.composite
def policy_specs(draw: st.DrawFn, policy_kind: str) -> OraclePolicy:
    roles = {entity_kind: draw(role_lists(entity_kind)) for entity_kind in POLICY_FIELDS[policy_kind]}  # type: ignore[index]
    policy_type = draw(st.sampled_from(TYPES)) if policy_kind == SERVICE_POLICY else None
    return OraclePolicy(draw(st.sampled_from(SEMANTICS)), policy_type, roles)


def apply_policy(graph: PolicyGraph, policy_kind: str, policy_id: str, spec: OraclePolicy) -> None:
    graph.upsert_policy(
        policy_kind,  # type: ignore[arg-type]
        policy_id,
        semantic=spec.semantic,
        type=spec.type,
        **{FIELD[kind]: roles for kind, roles in spec.roles.items()},
    )


def rebuild(oracle: Oracle) -> PolicyGraph:
    """The same state through the bulk path."""

    def rows(kind: str) -> list[EntityRow]:
        return [EntityRow(e, tuple(sorted(a))) for e, a in oracle.entities[kind].items()]

    def policy_rows(kind: str) -> list[PolicyRow]:
        return [
            PolicyRow(p, v.semantic, v.type, **{FIELD[k]: tuple(r) for k, r in v.roles.items()})
            for p, v in oracle.policies[kind].items()
        ]

    return PolicyGraph.build(
        rows(IDENTITY),
        rows(SERVICE),
        rows(EDGE_ROUTER),
        rows(POSTURE_CHECK),
        policy_rows(SERVICE_POLICY),
        policy_rows(EDGE_ROUTER_POLICY),
        policy_rows(SERVICE_EDGE_ROUTER_POLICY),
    )


entity_kinds = st.sampled_from(sorted(ENTITY_POOLS))
policy_kinds = st.sampled_from(sorted(POLICY_FIELDS))


class PolicyMachine(RuleBasedStateMachine):
    """Random mutations; the graph must equal the oracle after each one."""

    def __init__(self) -> None:
        super().__init__()
        self.graph = PolicyGraph()
        self.oracle = Oracle()

    @initialize(data=st.data(), bulk=st.booleans())
    def populate(self, data: st.DataObject, bulk: bool) -> None:
        """Start from a random universe, through the incremental path or the bulk one."""
        for kind, pool in ENTITY_POOLS.items():
            for entity_id in data.draw(st.lists(st.sampled_from(pool), unique=True, max_size=len(pool))):
                self.oracle.entities[kind][entity_id] = set(data.draw(attribute_sets))
        for policy_kind in POLICY_FIELDS:
            for policy_id in data.draw(st.lists(st.sampled_from(POLICY_POOL), unique=True, max_size=6)):
                spec = data.draw(policy_specs(policy_kind))
                if spec.type is not None:
                    spec.type = canonical_type(spec.type)
                self.oracle.policies[policy_kind][policy_id] = spec
        if bulk:
            self.graph = rebuild(self.oracle)
            return
        # Interleave: some policies before their entities, some after.
        for policy_kind, policies in self.oracle.policies.items():
            for policy_id, spec in list(policies.items())[::2]:
                apply_policy(self.graph, policy_kind, policy_id, spec)
        for kind, entities in self.oracle.entities.items():
            for entity_id, attributes in entities.items():
                self.graph.upsert_entity(kind, entity_id, sorted(attributes))  # type: ignore[arg-type]
        for policy_kind, policies in self.oracle.policies.items():
            for policy_id, spec in list(policies.items())[1::2]:
                apply_policy(self.graph, policy_kind, policy_id, spec)

    @rule(kind=entity_kinds, data=st.data(), attributes=attribute_sets)
    def upsert_entity(self, kind: str, data: st.DataObject, attributes: list[str]) -> None:
        entity_id = data.draw(st.sampled_from(ENTITY_POOLS[kind]))
        self.graph.upsert_entity(kind, entity_id, attributes)  # type: ignore[arg-type]
        self.oracle.entities[kind][entity_id] = set(attributes)

    @rule(kind=entity_kinds, data=st.data(), strip=st.booleans())
    def remove_entity(self, kind: str, data: st.DataObject, strip: bool) -> None:
        existing = sorted(self.oracle.entities[kind])
        if not existing:
            return
        entity_id = data.draw(st.sampled_from(existing))
        self.graph.remove_entity(kind, entity_id)  # type: ignore[arg-type]
        del self.oracle.entities[kind][entity_id]
        if strip:  # what the API does next (§1.4): strip @id and re-upsert the policies
            for policy_kind, policies in self.oracle.policies.items():
                for policy_id, spec in policies.items():
                    roles = spec.roles.get(kind)
                    if roles is not None and f"@{entity_id}" in roles:
                        spec.roles[kind] = [r for r in roles if r != f"@{entity_id}"]
                        apply_policy(self.graph, policy_kind, policy_id, spec)

    @rule(kind=policy_kinds, policy_id=st.sampled_from(POLICY_POOL), data=st.data())
    def upsert_policy(self, kind: str, policy_id: str, data: st.DataObject) -> None:
        spec = data.draw(policy_specs(kind))
        apply_policy(self.graph, kind, policy_id, spec)
        if spec.type is not None:
            spec.type = canonical_type(spec.type)
        self.oracle.policies[kind][policy_id] = spec

    @rule(kind=policy_kinds, data=st.data())
    def change_one_thing(self, kind: str, data: st.DataObject) -> None:
        """A semantic-only, type-only or one-side change (the cases OpenZiti gets subtle)."""
        existing = sorted(self.oracle.policies[kind])
        if not existing:
            return
        policy_id = data.draw(st.sampled_from(existing))
        spec = self.oracle.policies[kind][policy_id]
        what = data.draw(st.sampled_from(["semantic", "type", "side"]))
        if what == "semantic":
            spec.semantic = "AnyOf" if spec.semantic.lower() == "allof" else "AllOf"
        elif what == "type" and spec.type is not None:
            spec.type = "Bind" if spec.type == "Dial" else "Dial"
        else:
            entity_kind = data.draw(st.sampled_from(POLICY_FIELDS[kind]))  # type: ignore[index]
            spec.roles[entity_kind] = data.draw(role_lists(entity_kind))
        apply_policy(self.graph, kind, policy_id, spec)

    @rule(kind=policy_kinds, data=st.data())
    def remove_policy(self, kind: str, data: st.DataObject) -> None:
        existing = sorted(self.oracle.policies[kind])
        if not existing:
            return
        policy_id = data.draw(st.sampled_from(existing))
        self.graph.remove_policy(kind, policy_id)  # type: ignore[arg-type]
        del self.oracle.policies[kind][policy_id]

    @rule(dense=st.booleans())
    def rebuild_in_bulk(self, dense: bool) -> None:
        """Continue from a graph built by :meth:`PolicyGraph.build` (both bulk AllOf paths)."""
        Side.sparse_floor = 0 if dense else 64
        try:
            self.graph = rebuild(self.oracle)
        finally:
            Side.sparse_floor = 64

    @rule(kind=policy_kinds, policy_id=st.sampled_from(POLICY_POOL), data=st.data(), adopt=st.booleans())
    def what_if(self, kind: str, policy_id: str, data: st.DataObject, adopt: bool) -> None:
        """A change on a copy leaves the original alone; the copy keeps working incrementally."""
        scratch = self.graph.copy()
        future = self.oracle.copy()
        spec = data.draw(policy_specs(kind))
        apply_policy(scratch, kind, policy_id, spec)
        if spec.type is not None:
            spec.type = canonical_type(spec.type)
        future.policies[kind][policy_id] = spec
        entity_kind = data.draw(entity_kinds)
        entity_id = data.draw(st.sampled_from(ENTITY_POOLS[entity_kind]))
        attributes = data.draw(attribute_sets)
        scratch.upsert_entity(entity_kind, entity_id, attributes)  # type: ignore[arg-type]
        future.entities[entity_kind][entity_id] = set(attributes)
        check_all(scratch, future)
        check_all(self.graph, self.oracle)
        if adopt:
            self.graph, self.oracle = scratch, future

    @precondition(lambda self: bool(self.oracle.entities[IDENTITY]))
    @rule()
    def warm_router_caches(self) -> None:
        """Fill the advice caches so that later steps must invalidate them."""
        for identity, service in product(self.oracle.entities[IDENTITY], self.oracle.entities[SERVICE]):
            self.graph.advice(identity, service)

    @invariant()
    def matches_oracle(self) -> None:
        check_all(self.graph, self.oracle)


PolicyMachine.TestCase.settings = settings(
    max_examples=examples(100),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# about 36 s at the full examples (make test): started first (tests/schedule.py)
TestPolicyMachine = pytest.mark.seconds(36)(PolicyMachine.TestCase)


# -- targeted properties ---------------------------------------------------------------------------


def test_unknown_entities_and_policies_raise() -> None:
    """Queries on missing ids raise KeyError subclasses, not empty answers."""
    graph = PolicyGraph()
    graph.upsert_entity(IDENTITY, "i0", ["a"])
    with pytest.raises(UnknownEntityError):
        graph.services_for_identity("nope")
    with pytest.raises(UnknownEntityError):
        graph.advice("i0", "nope")
    with pytest.raises(UnknownPolicyError):
        graph.policy_members(SERVICE_POLICY, "nope", IDENTITY)
    with pytest.raises(UnknownEntityError):
        graph.remove_entity(SERVICE, "nope")


def test_wrong_fields_and_types_are_rejected() -> None:
    """A role field the policy kind does not have, or a service policy without a valid type."""
    graph = PolicyGraph()
    with pytest.raises(ValueError, match="no edge_router_roles"):
        graph.upsert_policy(SERVICE_POLICY, "p", semantic="AnyOf", type="Dial", edge_router_roles=["#a"])
    with pytest.raises(ValueError, match="needs a type"):
        graph.upsert_policy(SERVICE_POLICY, "p", semantic="AnyOf")
    with pytest.raises(ValueError, match="invalid policy type"):
        graph.upsert_policy(SERVICE_POLICY, "p", semantic="AnyOf", type="Both")
    with pytest.raises(ValueError, match="does not select"):
        graph.policies_for_entity(IDENTITY, "i", SERVICE_EDGE_ROUTER_POLICY)


@pytest.mark.parametrize("width", [70, 300])
def test_slot_reuse_over_wide_populations(width: int) -> None:
    """Many creates and deletes (slot reuse, bitsets wider than one chunk) stay exact."""
    graph = PolicyGraph()
    oracle = Oracle()
    graph.upsert_policy(
        SERVICE_POLICY,
        "p",
        semantic="AllOf",
        type="Dial",
        identity_roles=["#a", "#b"],
        service_roles=["#all"],
    )
    oracle.policies[SERVICE_POLICY]["p"] = OraclePolicy(
        "AllOf", "Dial", {IDENTITY: ["#a", "#b"], SERVICE: ["#all"], POSTURE_CHECK: []}
    )
    graph.upsert_entity(SERVICE, "s", [])
    oracle.entities[SERVICE]["s"] = set()
    for n in range(width):
        attributes = ["a", "b"] if n % 3 else ["a"]
        graph.upsert_entity(IDENTITY, f"w{n}", attributes)
        oracle.entities[IDENTITY][f"w{n}"] = set(attributes)
    for n in range(0, width, 4):
        graph.remove_entity(IDENTITY, f"w{n}")
        del oracle.entities[IDENTITY][f"w{n}"]
    for n in range(width, width + width // 5):
        graph.upsert_entity(IDENTITY, f"w{n}", ["b", "a"])
        oracle.entities[IDENTITY][f"w{n}"] = {"a", "b"}
    expected = sorted(oracle.linked(SERVICE_POLICY, SERVICE, "s", IDENTITY))
    assert graph.identities_for_service("s") == expected
    assert graph.policy_members(SERVICE_POLICY, "p", IDENTITY) == expected
    assert all(graph.policies_for_entity(IDENTITY, e, SERVICE_POLICY) == ["p"] for e in expected)
