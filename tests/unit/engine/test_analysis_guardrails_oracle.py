"""Guardrail verdicts against brute force (docs/analysis.md §10).

Random networks and batches (the strategies of ``test_analysis_oracle`` and ``test_policy_oracle``:
AllOf/AnyOf and odd casings, ``#all``, ``@id`` of present and missing entities, creates, deletes,
policy type changes), random online routers, random guardrails of every form, and a random batch
*pending* before the write (staged by another writer, not yet in the graph). The violations
:func:`~engine.analysis.guardrails.new_violations` says the write adds to each guardrail equal the
brute-force comparison of every pair before and after it, computed from the oracle's
word-for-word reading of docs/policy.md §1.2; the graph it was given is left as it was.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import product
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from engine.analysis.guardrails import Rule, new_violations
from engine.entities import Entity
from engine.entities.guardrails import FORMS
from engine.entities.identities import Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
)
from engine.policy.selector import normalize_semantic, parse_roles
from engine.ports import Change, Delete, Put
from tests.unit.engine.test_analysis_oracle import SETTINGS, batches, grants, grants_of, networks, routers_of
from tests.unit.engine.test_policy_oracle import SEMANTICS, Oracle, OraclePolicy, rebuild, role_lists, selects

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CLASSES: dict[str, type[Entity]] = {
    IDENTITY: Identity,
    SERVICE: Service,
    EDGE_ROUTER: EdgeRouter,
    POSTURE_CHECK: PostureCheck,
    SERVICE_POLICY: ServicePolicy,
    EDGE_ROUTER_POLICY: EdgeRouterPolicy,
    SERVICE_EDGE_ROUTER_POLICY: ServiceEdgeRouterPolicy,
}
FIELDS = {
    IDENTITY: "identity_roles",
    SERVICE: "service_roles",
    EDGE_ROUTER: "edge_router_roles",
    POSTURE_CHECK: "posture_check_roles",
}

Batch = list[tuple[str, str, str, object]]


def last_per_key(batch: Batch) -> Batch:
    """One change per entity, the last (what a unit of work commits)."""
    out: dict[tuple[str, str], tuple[str, str, str, object]] = {}
    for item in batch:
        out.pop((item[1], item[2]), None)
        out[item[1], item[2]] = item
    return list(out.values())


def changes(batch: Batch) -> list[Change]:
    """The store changes a batch is."""
    out: list[Change] = []
    for what, kind, item_id, value in batch:
        cls: Any = CLASSES[kind]
        if value is None:
            out.append(Delete(cls, item_id))
            continue
        common: dict[str, Any] = {"id": item_id, "created_at": NOW, "updated_at": NOW, "name": item_id}
        if what == "entity":
            assert isinstance(value, set)
            extra: dict[str, Any] = {"type_id": "OS"} if kind == POSTURE_CHECK else {}
            out.append(Put(cls(**common, role_attributes=sorted(value), **extra)))
            continue
        assert isinstance(value, OraclePolicy)
        roles = {FIELDS[k]: list(v) for k, v in value.roles.items()}
        typed: dict[str, Any] = {"type": value.type} if kind == SERVICE_POLICY else {}
        out.append(Put(cls(**common, semantic=value.semantic, **typed, **roles)))
    return out


def apply(oracle: Oracle, batch: Batch) -> None:
    for what, kind, item_id, value in batch:
        if what == "entity":
            if value is None:
                oracle.entities[kind].pop(item_id, None)
            else:
                assert isinstance(value, set)
                oracle.entities[kind][item_id] = set(value)
        elif value is None:
            oracle.policies[kind].pop(item_id, None)
        else:
            assert isinstance(value, OraclePolicy)
            oracle.policies[kind][item_id] = value
    oracle.memo.clear()


@st.composite
def rules(draw: st.DrawFn) -> list[Rule]:
    out = []
    for n in range(draw(st.integers(1, 3))):
        form = draw(st.sampled_from(FORMS))
        out.append(
            Rule(
                f"g{n}",
                f"g{n}",
                form,
                "enforce",
                "Dial" if form == "routers" else draw(st.sampled_from(("Dial", "Bind"))),
                normalize_semantic(draw(st.sampled_from(SEMANTICS))),
                parse_roles(draw(role_lists(IDENTITY))),
                parse_roles(draw(role_lists(SERVICE))),
            )
        )
    return out


def brute_force(
    oracle: Oracle, rule: Rule, semantic: str, roles: dict[str, list[str]], online: set[str]
) -> set[tuple[str, str, str]]:
    """Every violation of ``rule`` in ``oracle``: all pairs, the oracle's own selection rule."""
    oracle.memo.clear()
    out: set[tuple[str, str, str]] = set()
    for i, s in product(oracle.entities[IDENTITY], oracle.entities[SERVICE]):
        has_i = selects(roles[IDENTITY], semantic, i, oracle.entities[IDENTITY][i])
        has_s = selects(roles[SERVICE], semantic, s, oracle.entities[SERVICE][s])
        may = bool(oracle.linking(i, s, rule.type))
        if rule.form == "deny":
            bad = has_i and has_s and may
        elif rule.form == "only":
            bad = has_s and may and not has_i
        elif rule.form == "keep":
            bad = has_i and has_s and not may
        else:
            common = routers_of(oracle, EDGE_ROUTER_POLICY, IDENTITY, i) & routers_of(
                oracle, SERVICE_EDGE_ROUTER_POLICY, SERVICE, s
            )
            bad = has_i and has_s and may and not (common & online)
        if bad:
            out.add((i, s, rule.type))
    return out


def roles_of(rule: Rule) -> tuple[str, dict[str, list[str]]]:
    """The rule back as role lists and a semantic, for the oracle."""

    def listed(selector: object) -> list[str]:
        out = [f"#{a}" for a in sorted(selector.attributes)]  # type: ignore[attr-defined]
        out += [f"@{i}" for i in sorted(selector.ids)]  # type: ignore[attr-defined]
        return ["#all", *out] if selector.all else out  # type: ignore[attr-defined]

    semantic = {"allof": "AllOf", "anyof": "AnyOf", "none": "neither"}[rule.semantic]
    return semantic, {IDENTITY: listed(rule.identities), SERVICE: listed(rule.services)}


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_guardrail_verdicts_agree_with_brute_force(oracle: Oracle, data: st.DataObject) -> None:
    graph = rebuild(oracle)
    routers = sorted(oracle.entities[EDGE_ROUTER])
    online = set(data.draw(st.lists(st.sampled_from(routers), unique=True)) if routers else [])
    guardrails = data.draw(rules())
    pending = last_per_key(data.draw(batches(oracle))) if data.draw(st.booleans()) else []
    before = oracle.copy()
    apply(before, pending)
    batch = last_per_key(data.draw(batches(before)))
    after = before.copy()
    apply(after, batch)
    untouched = grants(oracle)

    verdicts = new_violations(graph, changes(pending), changes(batch), guardrails, online.__contains__)

    expected: dict[str, set[tuple[str, str, str]]] = {}
    for rule in guardrails:
        semantic, roles = roles_of(rule)
        added = brute_force(after, rule, semantic, roles, online) - brute_force(
            before, rule, semantic, roles, online
        )
        if added:
            expected[rule.id] = added
    assert {v.rule.id: set(v.pairs) for v in verdicts} == expected
    for verdict in verdicts:
        assert list(verdict.pairs) == sorted(verdict.pairs)
    assert grants_of(graph, oracle) == untouched  # the graph it was given is as it was
