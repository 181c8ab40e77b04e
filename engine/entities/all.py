"""Import every entity module so that ``ALL_KINDS`` is complete."""

from engine.entities import ALL_KINDS, Entity
from engine.entities.controllers import ControllerMember
from engine.entities.findings import FindingArchiveRule, FindingRecord
from engine.entities.guardrails import Guardrail, GuardrailViolation
from engine.entities.identities import (
    ApiSession,
    ApiSessionCertificate,
    Authenticator,
    Enrollment,
    Identity,
    Mfa,
)
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter, Router
from engine.entities.services import Config, ConfigType, Service, Terminator
from engine.entities.sessions import Session
from engine.entities.trust import AuthPolicy, Ca, ExternalJwtSigner

__all__ = [
    "ALL_KINDS",
    "ApiSession",
    "ApiSessionCertificate",
    "AuthPolicy",
    "Authenticator",
    "Ca",
    "Config",
    "ConfigType",
    "ControllerMember",
    "EdgeRouter",
    "EdgeRouterPolicy",
    "Enrollment",
    "Entity",
    "ExternalJwtSigner",
    "FindingArchiveRule",
    "FindingRecord",
    "Guardrail",
    "GuardrailViolation",
    "Identity",
    "Mfa",
    "PostureCheck",
    "Router",
    "Service",
    "ServiceEdgeRouterPolicy",
    "ServicePolicy",
    "Session",
    "Terminator",
]
