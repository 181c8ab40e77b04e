"""Posture wire shapes: posture responses (requests), posture queries, posture data, failures.

``postureQueries`` of the client service view follow OpenZiti's ``routes/service_api_model.go``:
each query carries the posture check's common entity fields (``updatedAt`` moved to the time its
data last changed when that is later) plus ``queryType``, ``isPassing``, ``timeout`` and
``timeoutRemaining``; PROCESS checks add ``process``, PROCESS_MULTI checks ``processes``.

Posture responses are limited in size (OpenZiti's spec sets no limit; these are far above what an
SDK reports, and keep what ``engine.managers.posture`` holds per identity bounded): ``id`` at most
:data:`MAX_ID_LENGTH` characters; ``domain`` and the OS ``type``, ``version`` and ``build`` at most
:data:`MAX_TEXT_LENGTH` (a DNS name has at most 253); a process ``path`` at most
:data:`MAX_PATH_LENGTH` (Linux's ``PATH_MAX``); ``hash`` and each signer fingerprint at most
:data:`MAX_HASH_LENGTH` (a SHA-512 in hex has 128 digits); at most :data:`MAX_SIGNERS` signer
fingerprints and :data:`MAX_MAC_ADDRESSES` MAC addresses of at most :data:`MAX_MAC_LENGTH`
characters each. A response over a limit refuses the request: 400 ``COULD_NOT_VALIDATE`` with the
field (``path``, ``signerFingerprints.3`` ...) in ``cause.field`` and a go-swagger style reason
(``path in body should be at most 4096 chars long``); the refused value is not echoed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, ValidationError

from api.errors import field_error_from_validation
from api.wire import WireModel, links, ts
from engine.errors import FieldError
from engine.managers.posture._core import (
    DOMAIN,
    ENDPOINT_STATE,
    MAC,
    OS,
    PROCESS,
    FailedServiceRequest,
    PolicyPosture,
    PostureData,
    PostureQuery,
    PostureResponse,
    ProcessRef,
    ServiceTimeout,
)

POSTURE_CHECKS = "posture-checks"


def _process(ref: ProcessRef) -> dict[str, Any]:
    return {"osType": ref.os_type, "path": ref.path}


def render_posture_query(query: PostureQuery) -> dict[str, Any]:
    """``postureQuery``."""
    out: dict[str, Any] = {
        "_links": links(POSTURE_CHECKS, query.id),
        "createdAt": ts(query.created_at),
        "id": query.id,
        "isPassing": query.is_passing,
        "name": query.name,
        "queryType": query.query_type,
        "tags": query.tags,
        "timeout": query.timeout,
        "timeoutRemaining": query.timeout_remaining,
        "updatedAt": ts(query.updated_at),
    }
    if query.process is not None:
        out["process"] = _process(query.process)
    if query.processes is not None:
        out["processes"] = [_process(p) for p in query.processes]
    if query.prompt_on_wake is not None:
        out["promptOnWake"] = query.prompt_on_wake
    if query.prompt_on_unlock is not None:
        out["promptOnUnlock"] = query.prompt_on_unlock
    if query.timeout_at is not None:
        out["timeoutAt"] = ts(query.timeout_at)
    return out


def render_policy_posture(item: PolicyPosture) -> dict[str, Any]:
    """One policy's ``postureQueries`` object."""
    return {
        "isPassing": item.is_passing,
        "policyId": item.policy_id,
        "policyType": item.policy_type,
        "postureQueries": [render_posture_query(q) for q in item.queries],
    }


def render_posture_queries(
    items: list[PolicyPosture], render: Callable[[PolicyPosture], dict[str, Any]] = render_policy_posture
) -> list[dict[str, Any]]:
    """A service's ``postureQueries``: one ``postureQueries`` object per policy (``render``: a
    page's renderer may keep each policy's, shared by the services it grants)."""
    return [render(item) for item in items]


# -- posture responses (client requests) ------------------------------------------------------
#: A posture check id (Trellis' and OpenZiti's have at most 36 characters; the C SDK's endpoint
#: state responses send ``"0"``).
MAX_ID_LENGTH = 256
#: A domain name, an OS type, version or build.
MAX_TEXT_LENGTH = 256
#: A process path.
MAX_PATH_LENGTH = 4096
#: A binary hash or a signer fingerprint.
MAX_HASH_LENGTH = 256
#: Signer fingerprints of one process.
MAX_SIGNERS = 64
#: MAC addresses of one response, and the length of each.
MAX_MAC_ADDRESSES = 1024
MAX_MAC_LENGTH = 64

CheckId = Annotated[str, Field(max_length=MAX_ID_LENGTH)]
Text = Annotated[str, Field(max_length=MAX_TEXT_LENGTH)]
Path = Annotated[str, Field(max_length=MAX_PATH_LENGTH)]
Hash = Annotated[str, Field(max_length=MAX_HASH_LENGTH)]
MacAddress = Annotated[str, Field(max_length=MAX_MAC_LENGTH)]


class _Response(WireModel):
    id: CheckId
    type_id: str


class DomainResponse(_Response):
    domain: Text


class MacResponse(_Response):
    mac_addresses: Annotated[list[MacAddress], Field(max_length=MAX_MAC_ADDRESSES)]


class OsResponse(_Response):
    type: Text
    version: Text
    build: Text | None = None


class ProcessResponse(_Response):
    path: Path | None = None
    is_running: bool | None = None
    hash: Hash | None = None
    signer_fingerprints: Annotated[list[Hash], Field(max_length=MAX_SIGNERS)] | None = None


class EndpointStateResponse(_Response):
    woken: bool | None = None
    unlocked: bool | None = None


RESPONSE_MODELS: dict[str, type[_Response]] = {
    DOMAIN: DomainResponse,
    ENDPOINT_STATE: EndpointStateResponse,
    MAC: MacResponse,
    OS: OsResponse,
    PROCESS: ProcessResponse,
}


def _response(model: _Response) -> PostureResponse:
    if isinstance(model, DomainResponse):
        return PostureResponse(model.id, model.type_id, domain=model.domain)
    if isinstance(model, MacResponse):
        return PostureResponse(model.id, model.type_id, mac_addresses=tuple(model.mac_addresses))
    if isinstance(model, OsResponse):
        return PostureResponse(
            model.id, model.type_id, os_type=model.type, os_version=model.version, os_build=model.build or ""
        )
    if isinstance(model, ProcessResponse):
        return PostureResponse(
            model.id,
            model.type_id,
            path=model.path or "",
            is_running=bool(model.is_running),
            hash=model.hash or "",
            signer_fingerprints=tuple(model.signer_fingerprints or ()),
        )
    assert isinstance(model, EndpointStateResponse)
    return PostureResponse(model.id, model.type_id, woken=bool(model.woken), unlocked=bool(model.unlocked))


def parse_posture_response(raw: Any) -> PostureResponse:
    """One ``postureResponseCreate``, its subtype chosen by ``typeId`` as go-swagger does."""
    if not isinstance(raw, dict):
        raise FieldError("body", "a posture response must be an object", None)
    type_id = raw.get("typeId")
    if type_id is None:
        raise FieldError("typeId", "typeId in body is required")
    model = RESPONSE_MODELS.get(type_id) if isinstance(type_id, str) else None
    if model is None:
        raise FieldError("typeId", f'invalid typeId value: "{type_id}"', type_id)
    try:
        return _response(model.model_validate(raw))
    except ValidationError as ex:
        raise _too_long(ex) or field_error_from_validation(ex) from None


def _too_long(ex: ValidationError) -> FieldError | None:
    """An over-limit string or list as go-swagger words it (``maxLength`` / ``maxItems``), without
    echoing the value; None for any other error."""
    first = ex.errors(include_url=False)[0]
    kind = first["type"]
    if kind not in ("string_too_long", "too_long"):
        return None
    field = ".".join(str(p) for p in first.get("loc", ())) or "body"
    context = first.get("ctx") or {}
    if kind == "string_too_long":
        return FieldError(field, f"{field} in body should be at most {context.get('max_length')} chars long")
    return FieldError(field, f"{field} in body should have at most {context.get('max_length')} items")


def parse_posture_responses(raw: Any, *, bulk: bool) -> list[PostureResponse]:
    """The body of ``/posture-response`` (one object) or ``/posture-response-bulk`` (an array)."""
    if not bulk:
        return [parse_posture_response(raw)]
    if not isinstance(raw, list):
        raise FieldError("body", "the body must be an array of posture responses", None)
    return [parse_posture_response(item) for item in raw]


def render_posture_response(timeouts: list[ServiceTimeout]) -> dict[str, Any]:
    """``postureResponse``: the services whose posture timers the responses changed."""
    return {
        "services": [
            {
                "id": t.id,
                "name": t.name,
                "postureQueryType": t.query_type,
                "timeout": t.timeout,
                "timeoutRemaining": t.timeout_remaining,
            }
            for t in timeouts
        ]
    }


# -- management views -------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """Failure values with their timestamps rendered."""
    if isinstance(value, datetime):
        return ts(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _base(check_id: str, last_updated_at: datetime | None, timed_out: bool) -> dict[str, Any]:
    return {"lastUpdatedAt": ts(last_updated_at), "postureCheckId": check_id, "timedOut": timed_out}


def render_posture_data(data: PostureData) -> dict[str, Any]:
    """``postureData`` of an identity."""
    sessions: dict[str, Any] = {}
    for session_id, entry in data.api_sessions.items():
        item: dict[str, Any] = {
            "endpointState": {"unlockedAt": ts(entry.unlocked_at), "wokenAt": ts(entry.woken_at)},
            "mfa": {
                "apiSessionId": session_id,
                "passedAt": ts(entry.passed_mfa_at),
                "passedMfa": entry.passed_mfa_at is not None,
                "passedOnUnlock": False,
                "passedOnWake": False,
            },
        }
        if entry.sdk_info:
            item["sdkInfo"] = dict(entry.sdk_info)
        sessions[session_id] = item
    return {
        "apiSessionPostureData": sessions,
        "domain": {
            **_base(data.domain.check_id, data.domain.last_updated_at, data.domain.timed_out),
            "domain": data.domain.name,
        },
        "mac": {
            **_base(data.mac.check_id, data.mac.last_updated_at, data.mac.timed_out),
            "addresses": list(data.mac.addresses),
        },
        "os": {
            **_base(data.os.check_id, data.os.last_updated_at, data.os.timed_out),
            "build": data.os.build,
            "type": data.os.type,
            "version": data.os.version,
        },
        "processes": [
            {
                **_base(p.check_id, p.last_updated_at, p.timed_out),
                "binaryHash": p.binary_hash,
                "isRunning": p.is_running,
                "signerFingerprints": list(p.signer_fingerprints),
            }
            for p in data.processes.values()
        ],
    }


def render_failed_service_request(failure: FailedServiceRequest) -> dict[str, Any]:
    """``failedServiceRequest``."""
    return {
        "apiSessionId": failure.api_session_id,
        "policyFailures": [
            {
                "checks": [
                    {
                        "postureCheckId": c.check_id,
                        "postureCheckName": c.check_name,
                        "postureCheckType": c.check_type,
                        **_plain(c.values),
                    }
                    for c in policy.checks
                ],
                "policyId": policy.policy_id,
                "policyName": policy.policy_name,
            }
            for policy in failure.policy_failures
        ],
        "serviceId": failure.service_id,
        "serviceName": failure.service_name,
        "sessionType": failure.session_type,
        "when": ts(failure.when),
    }
