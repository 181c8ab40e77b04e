"""Entity counts for ``GET /summary``, keyed as OpenZiti's ``Stores.GetEntityCounts`` keys them.

OpenZiti counts every store: edge child stores appear as ``<parent>.edge`` (``routers.edge``,
``services.edge``) and transit routers are not counted separately (they are ``routers``). Kinds
this controller does not keep (eventual events, revocations, ...) count 0; kinds other modules may
add later are found by entity name.
"""

from __future__ import annotations

from engine.entities import ALL_KINDS, Entity
from engine.entities.controllers import ControllerMember
from engine.entities.identities import ApiSession, Authenticator, Enrollment, Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter, Router
from engine.entities.services import Config, ConfigType, Service
from engine.entities.trust import AuthPolicy, Ca, ExternalJwtSigner
from engine.managers._base import Env
from engine.managers.posture_checks import BUILTIN_TYPES
from engine.ports import Store

#: OpenZiti key -> our entity kind.
KINDS: dict[str, type[Entity]] = {
    "apiSessions": ApiSession,
    "authPolicies": AuthPolicy,
    "authenticators": Authenticator,
    "cas": Ca,
    "configTypes": ConfigType,
    "configs": Config,
    "edgeRouterPolicies": EdgeRouterPolicy,
    "enrollments": Enrollment,
    "externalJwtSigners": ExternalJwtSigner,
    "identities": Identity,
    "postureChecks": PostureCheck,
    "routers.edge": EdgeRouter,
    "serviceEdgeRouterPolicies": ServiceEdgeRouterPolicy,
    "servicePolicies": ServicePolicy,
    "services": Service,
    "services.edge": Service,
}

#: OpenZiti key -> the ``ENTITY`` name of a kind another module may define.
OPTIONAL_KINDS = {
    "apiSessionCertificates": "api-session-certificates",
    "eventualEvents": "eventual-events",
    "revocations": "revocations",
    "sessions": "sessions",
    "terminators": "terminators",
}

IDENTITY_TYPE_COUNT = 2  # Default and Router


def _count_named(store: Store, entity: str) -> int:
    for kind in ALL_KINDS:
        if entity == kind.ENTITY:
            return store.count(kind)
    return 0


def entity_counts(env: Env) -> dict[str, int]:
    """Every OpenZiti summary key with its count, sorted by key."""
    store = env.store
    counts = {key: store.count(kind) for key, kind in KINDS.items()}
    counts.update({key: _count_named(store, name) for key, name in OPTIONAL_KINDS.items()})
    counts["routers"] = store.count(EdgeRouter) + store.count(Router)
    counts["controllers"] = max(1, store.count(ControllerMember))  # before its record: this one
    counts["identityTypes"] = IDENTITY_TYPE_COUNT
    counts["postureCheckTypes"] = len(BUILTIN_TYPES)
    counts["mfas"] = sum(1 for i in store.all(Identity) if i.is_mfa_enabled)
    return dict(sorted(counts.items()))
