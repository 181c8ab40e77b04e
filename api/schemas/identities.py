"""Identity wire shapes: request bodies, the detail renderer shared by both APIs, identity types."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field, TypeAdapter

from api.controller import Controller
from api.wire import Attributes, Cost, Tags, WireModel, base, ref, ts
from engine.entities.identities import DEFAULT_AUTH_POLICY_ID, Enrollment, Identity
from engine.entities.services import Config, Service
from engine.managers.identities import DEFAULT_TYPE, MAX_DISABLE_MINUTES, ROUTER_TYPE, EnrollmentRequest
from engine.query import Symbol, SymbolTable, SymbolType

IDENTITY_TYPES = (DEFAULT_TYPE, ROUTER_TYPE)
#: The wire ``identityType`` enum; User, Device and Service are aliases of Default.
WIRE_TYPES = ("User", "Device", "Service", "Router", "Default")
PRECEDENCES = ("default", "required", "failed")


def _one_of(allowed: tuple[str, ...]) -> AfterValidator:
    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"value must be one of {list(allowed)}")
        return value

    return AfterValidator(check)


IdentityType = Annotated[str, _one_of(WIRE_TYPES)]
Precedence = Annotated[str, _one_of(PRECEDENCES)]
AppData = dict[str, Any] | None


class IdentityEnrollment(WireModel):
    ott: bool | None = None
    ottca: str | None = None
    updb: str | None = None


class IdentityUpdate(WireModel):
    name: str
    is_admin: bool
    type: IdentityType
    app_data: AppData = None
    auth_policy_id: str | None = None
    default_hosting_cost: Cost | None = None
    default_hosting_precedence: Precedence | None = None
    service_hosting_costs: dict[str, Cost] | None = None
    service_hosting_precedences: dict[str, Precedence] | None = None
    external_id: str | None = None
    role_attributes: Attributes = None
    tags: Tags = None


class IdentityCreate(IdentityUpdate):
    """A replacement's fields plus the optional first enrollment."""

    enrollment: IdentityEnrollment | None = None


class IdentityPatch(WireModel):
    name: str | None = None
    is_admin: bool | None = None
    type: IdentityType | None = None
    app_data: AppData = None
    auth_policy_id: str | None = None
    default_hosting_cost: Cost | None = None
    default_hosting_precedence: Precedence | None = None
    service_hosting_costs: dict[str, Cost] | None = None
    service_hosting_precedences: dict[str, Precedence] | None = None
    external_id: str | None = None
    role_attributes: Attributes = None
    tags: Tags = None


class DisableParams(WireModel):
    duration_minutes: Annotated[int, Field(ge=0, le=MAX_DISABLE_MINUTES)]


def type_id_of(wire_type: str) -> str:
    """The identity type id for a wire ``identityType`` (User/Device/Service mean Default)."""
    return ROUTER_TYPE if wire_type == ROUTER_TYPE else DEFAULT_TYPE


def enrollment_request(model: IdentityCreate) -> EnrollmentRequest | None:
    if model.enrollment is None:
        return None
    e = model.enrollment
    return EnrollmentRequest(ott=bool(e.ott), ottca=e.ottca or None, updb=e.updb or None)


# -- identity types ------------------------------------------------------------------------------
#: Identity types are built in; they carry a fixed creation time.
_TYPES_CREATED = datetime(2020, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class IdentityTypeRow:
    """An identity type: built in, not stored."""

    id: str
    name: str
    created_at: datetime = _TYPES_CREATED
    updated_at: datetime = _TYPES_CREATED
    tags: dict[str, Any] = field(default_factory=dict)


def identity_types() -> list[IdentityTypeRow]:
    return [IdentityTypeRow(id=t, name=t) for t in IDENTITY_TYPES]


def render_identity_type(row: IdentityTypeRow) -> dict[str, Any]:
    return {
        "_links": {"self": {"href": f"./identity-types/{row.id}"}},
        "createdAt": ts(row.created_at),
        "id": row.id,
        "name": row.name,
        "tags": row.tags,
        "updatedAt": ts(row.updated_at),
    }


def identity_type_ref(type_id: str) -> dict[str, Any]:
    return {
        "_links": {"self": {"href": f"./identity-types/{type_id}"}},
        "entity": "identity-types",
        "id": type_id,
        "name": type_id,
    }


def identity_symbols(ctrl: Controller) -> SymbolTable:
    """The filterable fields of identities (OpenZiti's identity store public symbols)."""
    string, boolean, when = SymbolType.STRING, SymbolType.BOOL, SymbolType.DATETIME
    return SymbolTable(
        {
            "id": Symbol(string, lambda i: i.id),
            "createdAt": Symbol(when, lambda i: i.created_at),
            "updatedAt": Symbol(when, lambda i: i.updated_at),
            "name": Symbol(string, lambda i: i.name),
            "isAdmin": Symbol(boolean, lambda i: i.is_admin),
            "isDefaultAdmin": Symbol(boolean, lambda i: i.is_default_admin),
            "roleAttributes": Symbol(string, lambda i: i.role_attributes, is_set=True),
            "type": Symbol(string, lambda i: i.type_id),
            "authPolicy": Symbol(string, lambda i: i.auth_policy_id),
            "authPolicyId": Symbol(string, lambda i: i.auth_policy_id),
            "externalId": Symbol(string, lambda i: i.external_id),
            "disabled": Symbol(boolean, lambda i: is_disabled(ctrl, i)),
            "disabledAt": Symbol(when, lambda i: i.disabled_at),
            "disabledUntil": Symbol(when, lambda i: i.disabled_until),
        },
        tags_getter=lambda i: i.tags,
    )


def identity_type_symbols() -> SymbolTable:
    string, when = SymbolType.STRING, SymbolType.DATETIME
    return SymbolTable(
        {
            "id": Symbol(string, lambda t: t.id),
            "name": Symbol(string, lambda t: t.name),
            "createdAt": Symbol(when, lambda t: t.created_at),
            "updatedAt": Symbol(when, lambda t: t.updated_at),
        },
        tags_getter=lambda t: t.tags,
    )


# -- identity detail ------------------------------------------------------------------------------
def is_disabled(ctrl: Controller, identity: Identity) -> bool:
    """Disabled now: locked, and the lock has no end or has not ended yet (as OpenZiti computes it)."""
    return ctrl.managers.identities.is_disabled(identity)


def identity_form(identity: Identity) -> dict[str, Any]:
    """What ``identityDetail`` takes from the identity alone (see :class:`~api.wire.Forms`)."""
    policy_id = identity.auth_policy_id or DEFAULT_AUTH_POLICY_ID
    out = base(
        identity,
        "auth-policies",
        "authenticators",
        "edge-router-policies",
        "edge-routers",
        "enrollments",
        "failed-service-requests",
        "posture-data",
        "service-configs",
        "service-policies",
        "services",
    )
    out["_links"]["auth-policies"] = {"href": f"./auth-policies/{policy_id}"}
    out.update(
        {
            "appData": identity.app_data,
            "authPolicyId": policy_id,
            "defaultHostingCost": identity.default_hosting_cost,
            "defaultHostingPrecedence": identity.default_hosting_precedence,
            "envInfo": identity.env_info,
            "externalId": identity.external_id,
            "isAdmin": identity.is_admin,
            "isDefaultAdmin": identity.is_default_admin,
            "isMfaEnabled": identity.is_mfa_enabled,
            "name": identity.name,
            # identityDetail requires it: the fine-grained admin permissions, none granted here.
            "permissions": [],
            "roleAttributes": identity.role_attributes,
            "sdkInfo": identity.sdk_info,
            "serviceHostingCosts": identity.service_hosting_costs,
            "serviceHostingPrecedences": identity.service_hosting_precedences,
            "type": identity_type_ref(identity.type_id),
            "typeId": identity.type_id,
        }
    )
    # null times are left out, as Go's omitempty does (OpenZiti v1.6.0)
    if identity.disabled_at is not None:
        out["disabledAt"] = ts(identity.disabled_at)
    if identity.disabled_until is not None:
        out["disabledUntil"] = ts(identity.disabled_until)
    return out


def render_identity(
    ctrl: Controller, identity: Identity, form: Callable[[Identity], dict[str, Any]] = identity_form
) -> dict[str, Any]:
    """``identityDetail``: the identity's own part from ``form`` (a :class:`~api.wire.Forms`
    keeps it), then what other entities, the time and the edge routers say (authenticators,
    enrollments, the auth policy's name, a live API session, disabled now, an SDK connected)."""
    managers = ctrl.managers
    authenticators: dict[str, Any] = {}
    for auth in managers.authenticators.for_identity(identity.id):
        if auth.method == "updb":
            authenticators["updb"] = {"id": auth.id, "username": auth.username}
        elif auth.method == "cert":
            authenticators["cert"] = {"id": auth.id, "fingerprint": auth.fingerprint}
    enrollment: dict[str, Any] = {}
    for enr in managers.enrollments.for_identity(identity.id):
        enrollment[enr.method] = render_enrollment_summary(ctrl, enr)
    sessions = managers.api_sessions
    out = form(identity)
    out["authPolicy"] = ref(managers.auth_policies.get(out["authPolicyId"]))
    out["authenticators"] = authenticators
    out["disabled"] = is_disabled(ctrl, identity)
    out["enrollment"] = enrollment
    out["hasApiSession"] = any(
        not sessions.is_expired(s) for s in sessions.find_by("identity_id", identity.id)
    )
    # an SDK of the identity has a channel open on an online edge router (the routers report them)
    connected = managers.fleet.has_edge_connection(identity.id)
    out["hasEdgeRouterConnection"] = connected
    out["edgeRouterConnectionStatus"] = "online" if connected else "offline"
    return out


def render_enrollment_summary(ctrl: Controller, enrollment: Enrollment) -> dict[str, Any]:
    """The ``enrollment.<method>`` entry of an identity: id, token, jwt, expiresAt (+ ca)."""
    out: dict[str, Any] = {
        "expiresAt": ts(enrollment.expires_at),
        "id": enrollment.id,
        "jwt": enrollment.jwt,
        "token": enrollment.token,
    }
    if enrollment.method == "ottca" and enrollment.ca_id:
        out["caId"] = enrollment.ca_id
        out["ca"] = ref(ctrl.managers.cas.get(enrollment.ca_id))
    return out


# -- service-config overrides ---------------------------------------------------------------------
class ServiceConfigAssign(WireModel):
    """``serviceConfigAssign``: a service and the config that overrides its config of that type."""

    service_id: str
    config_id: str


#: ``serviceConfigsAssignList``: the body of POST and DELETE ``/identities/{id}/service-configs``.
SERVICE_CONFIG_LIST = TypeAdapter(list[ServiceConfigAssign])


def render_service_config(service: Service, config: Config) -> dict[str, Any]:
    """``serviceConfigDetail``."""
    return {"config": ref(config), "configId": config.id, "service": ref(service), "serviceId": service.id}
