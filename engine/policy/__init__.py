"""The policy engine: OpenZiti role matching, incremental reachability, provenance, advice, explain.

Pure (stdlib + networkx). Start with :class:`PolicyGraph`; :func:`explain` and :func:`neighbourhood`
present why a pair is or is not linked.
"""

from engine.policy.advice import Advice
from engine.policy.explain import Explanation, Grant, Miss, SideMatch, explain, neighbourhood
from engine.policy.graph import PolicyGraph
from engine.policy.model import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    ENTITY_KINDS,
    IDENTITY,
    POLICY_FIELDS,
    POLICY_KINDS,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    EntityKind,
    EntityLike,
    EntityRow,
    PolicyKind,
    PolicyLike,
    PolicyRecord,
    PolicyRow,
    PolicyType,
    UnknownEntityError,
    UnknownPolicyError,
)
from engine.policy.selector import Selector, parse_roles

__all__ = [
    "EDGE_ROUTER",
    "EDGE_ROUTER_POLICY",
    "ENTITY_KINDS",
    "IDENTITY",
    "POLICY_FIELDS",
    "POLICY_KINDS",
    "POSTURE_CHECK",
    "SERVICE",
    "SERVICE_EDGE_ROUTER_POLICY",
    "SERVICE_POLICY",
    "Advice",
    "EntityKind",
    "EntityLike",
    "EntityRow",
    "Explanation",
    "Grant",
    "Miss",
    "PolicyGraph",
    "PolicyKind",
    "PolicyLike",
    "PolicyRecord",
    "PolicyRow",
    "PolicyType",
    "Selector",
    "SideMatch",
    "UnknownEntityError",
    "UnknownPolicyError",
    "explain",
    "neighbourhood",
    "parse_roles",
]
