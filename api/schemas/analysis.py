"""Wire shapes of ``/analysis/v1`` (docs/analysis.md): batch requests and the answers' renderers.

A batch item names a management kind by its path (``service-policies``, ...), an operation
(``create``, ``update`` for a PUT, ``patch``, ``delete``), the entity's ``id`` (not for a create)
and the ``body`` the management API would take for it, validated by that API's own models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from api.wire import Tags, WireModel, one_of, ts
from engine.analysis import MAX_BATCH_ITEMS
from engine.analysis.explain import Miss, RouterExplanation, ServiceExplanation
from engine.analysis.guardrails import REPORTED_PAIRS, Verdict
from engine.entities.guardrails import FORMS, MODES, Guardrail, GuardrailViolation
from engine.policy import EDGE_ROUTER_POLICY, SERVICE_EDGE_ROUTER_POLICY, SERVICE_POLICY
from engine.query import Symbol, SymbolTable, SymbolType

#: The management kinds a batch may write: path -> the manager's name in ``Managers``.
BATCH_KINDS = {
    "identities": "identities",
    "services": "services",
    "edge-routers": "edge_routers",
    "posture-checks": "posture_checks",
    "service-policies": "service_policies",
    "edge-router-policies": "edge_router_policies",
    "service-edge-router-policies": "service_edge_router_policies",
}
OPERATIONS = ("create", "update", "patch", "delete")
#: How many pairs each list of an answer names at most (the counts are always exact).
PAIR_LIMIT = 10_000

PATHS = {
    SERVICE_POLICY: "service-policies",
    EDGE_ROUTER_POLICY: "edge-router-policies",
    SERVICE_EDGE_ROUTER_POLICY: "service-edge-router-policies",
    "identity": "identities",
    "service": "services",
    "edge-router": "edge-routers",
    "posture-check": "posture-checks",
}


class BatchItem(WireModel):
    """One proposed write."""

    op: Annotated[str, AfterValidator(one_of("op", OPERATIONS))]
    kind: Annotated[str, AfterValidator(one_of("kind", tuple(BATCH_KINDS)))]
    id: str | None = None
    body: dict[str, Any] | None = None


class WhatIfRequest(WireModel):
    """``POST /what-if``: the writes to evaluate."""

    items: list[BatchItem] = Field(max_length=MAX_BATCH_ITEMS)


class ApplyRequest(WireModel):
    """``POST /apply``: the writes, and the revision their what-if was computed at."""

    revision: int = Field(ge=0)
    items: list[BatchItem] = Field(max_length=MAX_BATCH_ITEMS)


Name = Callable[[str, str], str]
"""(engine kind, id) -> its name ("" when unknown)."""


def render_miss(miss: Miss) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": miss.kind, "cost": miss.cost, "message": miss.message}
    if miss.policy_id is not None:
        out["policyKind"] = PATHS.get(miss.policy_kind or "", miss.policy_kind)
        out["policyId"] = miss.policy_id
    if miss.entity is not None:
        out["entity"] = miss.entity
    if miss.missing:
        out["missing"] = list(miss.missing)
        out["anyOf"] = miss.any_of
    return out


def render_service_explanation(revision: int, answer: ServiceExplanation, name: Name) -> dict[str, Any]:
    return {
        "revision": revision,
        "identityId": answer.identity_id,
        "identityName": name("identity", answer.identity_id),
        "serviceId": answer.service_id,
        "serviceName": name("service", answer.service_id),
        "type": answer.type,
        "allowed": answer.allowed,
        "checks": {
            "policy": answer.policy,
            "posture": answer.posture,
            "commonRouter": answer.common_router,
            "onlineRouter": answer.online_router,
            "identityEnabled": not answer.identity_disabled,
        },
        "grants": [
            {
                "policyId": g.policy_id,
                "policyName": name(SERVICE_POLICY, g.policy_id),
                "semantic": g.semantic,
                "identityRoles": list(g.identity_roles),
                "serviceRoles": list(g.service_roles),
                "postureChecks": [
                    {
                        "id": v.check_id,
                        "name": name("posture-check", v.check_id),
                        "isPassing": v.passes,
                        **({"failure": v.what} if not v.passes else {}),
                    }
                    for v in g.posture
                ],
                "isPosturePassing": g.posture_passes,
            }
            for g in answer.grants
        ],
        "routers": [
            {
                "id": r.router_id,
                "name": name("edge-router", r.router_id),
                "isOnline": r.online,
                "edgeRouterPolicies": list(r.edge_router_policies),
                "serviceEdgeRouterPolicies": list(r.service_edge_router_policies),
            }
            for r in answer.routers
        ],
        "identityRouterCount": len(answer.identity_routers),
        "serviceRouterCount": len(answer.service_routers),
        "misses": [render_miss(m) for m in answer.misses],
    }


def render_router_explanation(revision: int, answer: RouterExplanation, name: Name) -> dict[str, Any]:
    return {
        "revision": revision,
        "identityId": answer.identity_id,
        "identityName": name("identity", answer.identity_id),
        "edgeRouterId": answer.router_id,
        "edgeRouterName": name("edge-router", answer.router_id),
        "allowed": answer.allowed,
        "checks": {
            "policy": answer.policy,
            "online": answer.online,
            "identityEnabled": not answer.identity_disabled,
        },
        "grants": [
            {
                "policyId": g.policy_id,
                "policyName": name(EDGE_ROUTER_POLICY, g.policy_id),
                "semantic": g.semantic,
                "identityRoles": list(g.identity_roles),
                "edgeRouterRoles": list(g.router_roles),
            }
            for g in answer.grants
        ],
        "misses": [render_miss(m) for m in answer.misses],
    }


# -- guardrails (docs/analysis.md §10) ---------------------------------------------------------------


class GuardrailCreate(WireModel):
    """``POST /guardrails``."""

    name: str
    form: Annotated[str, AfterValidator(one_of("form", FORMS))]
    mode: Annotated[str, AfterValidator(one_of("mode", MODES))] | None = None
    semantic: str | None = None
    type: Annotated[str, AfterValidator(one_of("type", ("Dial", "Bind")))] | None = None
    identity_roles: list[str] | None = None
    service_roles: list[str] | None = None
    description: str | None = None
    tags: Tags = None


class GuardrailUpdate(GuardrailCreate):
    """``PUT /guardrails/{id}``: every field (absent ones reset)."""


class GuardrailPatch(WireModel):
    """``PATCH /guardrails/{id}``: the fields given."""

    name: str | None = None
    form: Annotated[str, AfterValidator(one_of("form", FORMS))] | None = None
    mode: Annotated[str, AfterValidator(one_of("mode", MODES))] | None = None
    semantic: str | None = None
    type: Annotated[str, AfterValidator(one_of("type", ("Dial", "Bind")))] | None = None
    identity_roles: list[str] | None = None
    service_roles: list[str] | None = None
    description: str | None = None
    tags: Tags = None


def _links(kind: str, entity_id: str) -> dict[str, Any]:
    return {"self": {"href": f"./{kind}/{entity_id}"}}


def render_guardrail(guardrail: Guardrail) -> dict[str, Any]:
    return {
        "_links": _links("guardrails", guardrail.id),
        "id": guardrail.id,
        "createdAt": ts(guardrail.created_at),
        "updatedAt": ts(guardrail.updated_at),
        "tags": guardrail.tags,
        "name": guardrail.name,
        "form": guardrail.form,
        "mode": guardrail.mode,
        "semantic": guardrail.semantic,
        "type": guardrail.type,
        "identityRoles": list(guardrail.identity_roles),
        "serviceRoles": list(guardrail.service_roles),
        "description": guardrail.description,
    }


def render_violation(violation: GuardrailViolation) -> dict[str, Any]:
    return {
        "_links": _links("guardrail-violations", violation.id),
        "id": violation.id,
        "createdAt": ts(violation.created_at),
        "updatedAt": ts(violation.updated_at),
        "tags": violation.tags,
        "guardrailId": violation.guardrail_id,
        "guardrailName": violation.guardrail_name,
        "revision": violation.revision,
        "count": violation.count,
        "pairs": list(violation.pairs),
    }


def render_verdicts(verdicts: Sequence[Verdict]) -> list[dict[str, Any]]:
    """What a batch would add to each guardrail (a what-if's ``guardrails``)."""
    return [
        {
            "id": v.rule.id,
            "name": v.rule.name,
            "form": v.rule.form,
            "mode": v.rule.mode,
            "count": v.count,
            "pairs": [{"identityId": i, "serviceId": s, "type": t} for i, s, t in v.pairs[:REPORTED_PAIRS]],
        }
        for v in verdicts
    ]


def _common_symbols() -> dict[str, Symbol]:
    return {
        "id": Symbol(SymbolType.STRING, lambda e: e.id),
        "createdAt": Symbol(SymbolType.DATETIME, lambda e: e.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda e: e.updated_at),
    }


GUARDRAIL_SYMBOLS = SymbolTable(
    {
        **_common_symbols(),
        "name": Symbol(SymbolType.STRING, lambda g: g.name),
        "form": Symbol(SymbolType.STRING, lambda g: g.form),
        "mode": Symbol(SymbolType.STRING, lambda g: g.mode),
        "semantic": Symbol(SymbolType.STRING, lambda g: g.semantic),
        "type": Symbol(SymbolType.STRING, lambda g: g.type),
        "description": Symbol(SymbolType.STRING, lambda g: g.description),
    },
    tags_getter=lambda g: g.tags,
)

VIOLATION_SYMBOLS = SymbolTable(
    {
        **_common_symbols(),
        "guardrailId": Symbol(SymbolType.STRING, lambda v: v.guardrail_id),
        "guardrailName": Symbol(SymbolType.STRING, lambda v: v.guardrail_name),
        "revision": Symbol(SymbolType.NUMBER, lambda v: v.revision),
        "count": Symbol(SymbolType.NUMBER, lambda v: v.count),
    },
    tags_getter=lambda v: v.tags,
)
