"""Import every entity module so that ``ALL_KINDS`` is complete."""

from engine.entities import ALL_KINDS, Entity
from engine.entities.identities import ApiSession, Authenticator, Enrollment, Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter, Router
from engine.entities.services import Config, ConfigType, Service
from engine.entities.trust import AuthPolicy, Ca, ExternalJwtSigner

__all__ = [
    "ALL_KINDS",
    "ApiSession",
    "AuthPolicy",
    "Authenticator",
    "Ca",
    "Config",
    "ConfigType",
    "EdgeRouter",
    "EdgeRouterPolicy",
    "Enrollment",
    "Entity",
    "ExternalJwtSigner",
    "Identity",
    "PostureCheck",
    "Router",
    "Service",
    "ServiceEdgeRouterPolicy",
    "ServicePolicy",
]
