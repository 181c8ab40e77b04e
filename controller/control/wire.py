"""The control protocol's bodies, read and written (``channel.control`` documents them).

Reading checks every field's type and bounds its size (a wrong one is
:class:`~channel.control.BadBody`: the request is answered ``ERROR`` code 1); writing turns the
engine's answers and events (``engine.managers.edge_control``) into messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from channel import control
from channel.control import BadBody, body_of, strings, text
from channel.edge import (
    ERROR_ENCRYPTION_DATA_MISSING,
    ERROR_INTERNAL,
    ERROR_INVALID_API_SESSION,
    ERROR_INVALID_COST,
    ERROR_INVALID_EDGE_ROUTER_FOR_SESSION,
    ERROR_INVALID_PRECEDENCE,
    ERROR_INVALID_SERVICE,
    ERROR_INVALID_SESSION,
    ERROR_INVALID_TERMINATOR,
    ERROR_TUNNELING_NOT_ENABLED,
    ERROR_WRONG_SESSION_TYPE,
    INVALID_SESSION_TEXT,
)
from channel.frames import HELLO_VERSION, RESULT_SUCCESS, Message
from engine.entities.services import Terminator
from engine.managers.edge_control import CircuitGrant, HostedService, Refusal, RouterApiSession, RouterHello
from engine.managers.fleet import LinkReport, Presence, VersionInfo

#: The largest hello body taken (its terminator ids make it grow with the binds a router holds).
MAX_HELLO_BODY_BYTES = 256 * 1024
#: Bounds on what a hello says of the router.
MAX_HOSTNAME = 253
MAX_ADDRESS = 512
MAX_PROTOCOLS = 16
MAX_VERSION = 512

#: Bounds on the ids of a ``LINKS`` report and of circuits.
MAX_ID = 64

#: OpenZiti's edge error code for each refusal.
REFUSAL_CODES = {
    Refusal.INTERNAL: ERROR_INTERNAL,
    Refusal.INVALID_API_SESSION: ERROR_INVALID_API_SESSION,
    Refusal.INVALID_SESSION: ERROR_INVALID_SESSION,
    Refusal.WRONG_SESSION_TYPE: ERROR_WRONG_SESSION_TYPE,
    Refusal.INVALID_EDGE_ROUTER_FOR_SESSION: ERROR_INVALID_EDGE_ROUTER_FOR_SESSION,
    Refusal.INVALID_SERVICE: ERROR_INVALID_SERVICE,
    Refusal.INVALID_TERMINATOR: ERROR_INVALID_TERMINATOR,
    Refusal.INVALID_PRECEDENCE: ERROR_INVALID_PRECEDENCE,
    Refusal.INVALID_COST: ERROR_INVALID_COST,
    Refusal.ENCRYPTION_DATA_MISSING: ERROR_ENCRYPTION_DATA_MISSING,
    Refusal.TUNNELING_NOT_ENABLED: ERROR_TUNNELING_NOT_ENABLED,
}
#: Codes whose answer is exactly "Invalid Session": the C SDK then fetches a new session and retries.
INVALID_SESSION_CODES = frozenset(
    {
        ERROR_INVALID_API_SESSION,
        ERROR_INVALID_SESSION,
        ERROR_WRONG_SESSION_TYPE,
        ERROR_INVALID_EDGE_ROUTER_FOR_SESSION,
    }
)


def flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise BadBody(f"{key} must be a boolean")
    return value


def integer(body: dict[str, Any], key: str, default: int = 0) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadBody(f"{key} must be an integer")
    return value


def bounded(value: str, key: str, limit: int) -> str:
    if len(value) > limit:
        raise BadBody(f"{key} is longer than {limit} characters")
    return value


# -- router -> controller ---------------------------------------------------------------------------
def read_hello(message: Message) -> RouterHello:
    raw_version = message.text(HELLO_VERSION)
    version = VersionInfo.parse(raw_version) if raw_version and len(raw_version) <= MAX_VERSION else None
    if version is None:
        raise BadBody("header 4 must hold the version as version|revision|buildDate|os|arch")
    body = body_of(message)
    protocols = body.get("protocols", {})
    if (
        not isinstance(protocols, dict)
        or len(protocols) > MAX_PROTOCOLS
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in protocols.items())
    ):
        raise BadBody("protocols must be an object of protocol -> address strings")
    for name, address in protocols.items():
        bounded(name, "a protocol", 32)
        bounded(address, f"protocols.{name}", MAX_ADDRESS)
    return RouterHello(
        hostname=bounded(text(body, "hostname"), "hostname", MAX_HOSTNAME),
        protocols=dict(protocols),
        link_listener=bounded(text(body, "linkListener"), "linkListener", MAX_ADDRESS),
        tunneler=flag(body, "tunneler"),
        terminators=tuple(strings(body, "terminators")),
        version=version,
        started_at=_started_at(body),
    )


#: The latest ``startedAt`` a hello may give (milliseconds since the epoch): the year 9999.
MAX_STARTED_AT_MS = 253_402_300_799_999


def _started_at(body: dict[str, Any]) -> datetime | None:
    """When the router's process started (``startedAt``, milliseconds since the epoch), if said."""
    if body.get("startedAt") is None:
        return None
    ms = integer(body, "startedAt")
    if not 0 <= ms <= MAX_STARTED_AT_MS:
        raise BadBody("startedAt must be milliseconds since 1970 (a whole number, not negative)")
    return datetime.fromtimestamp(ms / 1000, UTC)


def hello_circuits(message: Message) -> list[str]:
    """The circuits a hello says the router still holds (at most ``MAX_HELLO_CIRCUITS``)."""
    ids = strings(body_of(message), "circuits")
    if len(ids) > control.MAX_HELLO_CIRCUITS:
        raise BadBody(f"circuits lists more than {control.MAX_HELLO_CIRCUITS} ids")
    return [bounded(i, "a circuit id", MAX_ID) for i in ids]


def read_links(body: dict[str, Any]) -> list[LinkReport]:
    """A ``LINKS`` report: the links up on the router."""
    entries = body.get("links", [])
    if not isinstance(entries, list) or len(entries) > control.MAX_LINKS:
        raise BadBody(f"links must be a list of at most {control.MAX_LINKS} objects")
    out = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise BadBody("a link must be an object")
        out.append(
            LinkReport(
                id=bounded(text(entry, "id"), "a link id", MAX_ID),
                peer_id=bounded(text(entry, "routerId"), "a link's routerId", MAX_ID),
                dialed=flag(entry, "dialed"),
                protocol=bounded(text(entry, "protocol", "tls"), "a link's protocol", 32) or "tls",
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """The fields a circuit or a terminator request shares."""

    token: str
    api_session_id: str
    fingerprints: tuple[str, ...]
    has_public_key: bool


def read_session_request(body: dict[str, Any]) -> SessionRequest:
    return SessionRequest(
        token=text(body, "sessionToken"),
        api_session_id=text(body, "apiSessionId"),
        fingerprints=tuple(strings(body, "fingerprints")),
        has_public_key=flag(body, "hasPublicKey"),
    )


@dataclass(frozen=True, slots=True)
class TunnelTerminatorRequest:
    """A tunneler router asks for the terminator of a service it hosts (None: not given)."""

    service_id: str
    cost: int | None
    precedence: str | None
    instance_id: str | None


def read_tunnel_terminator_request(body: dict[str, Any]) -> TunnelTerminatorRequest:
    return TunnelTerminatorRequest(
        service_id=bounded(text(body, "serviceId"), "serviceId", MAX_ADDRESS),
        cost=integer(body, "cost") if body.get("cost") is not None else None,
        precedence=text(body, "precedence") if body.get("precedence") is not None else None,
        instance_id=(
            bounded(text(body, "instanceId"), "instanceId", MAX_ADDRESS)
            if body.get("instanceId") is not None
            else None
        ),
    )


# -- controller -> router ---------------------------------------------------------------------------
def hello_result(
    request: Message, *, router_id: str, router_name: str, heartbeat: float, unknown: list[str]
) -> Message:
    body = {
        "routerId": router_id,
        "routerName": router_name,
        "heartbeatSeconds": heartbeat,
        "unknownTerminators": unknown,
    }
    reply = control.message(control.RESULT, body)
    reply.set_flag(RESULT_SUCCESS, True)
    return reply.reply_to(request)


def refusal(request: Message, kind: Refusal, reason: str) -> Message:
    """The ``ERROR`` answering a refused request (codes 2-5: exactly "Invalid Session")."""
    code = REFUSAL_CODES[kind]
    return control.error(request, code, INVALID_SESSION_TEXT if code in INVALID_SESSION_CODES else reason)


def circuit_reply(request: Message, grant: CircuitGrant, circuit_id: str) -> Message:
    terminator = grant.terminator
    body = {
        "circuitId": circuit_id,
        "sessionId": grant.session.id,
        "serviceId": grant.service.id,
        "serviceName": grant.service.name,
        "callerId": grant.caller_id,
        "terminator": {
            "id": terminator.id,
            "routerId": terminator.router_id,
            "binding": terminator.binding,
            "address": terminator.address,
            "instanceId": terminator.instance_id,
        },
        "path": list(grant.path),
    }
    return control.message(control.CREATE_CIRCUIT_REPLY, body).reply_to(request)


def terminator_reply(request: Message, terminator: Terminator) -> Message:
    body = {
        "terminatorId": terminator.id,
        "sessionId": terminator.host_id,
        "serviceId": terminator.service_id,
    }
    return control.message(control.CREATE_TERMINATOR_REPLY, body).reply_to(request)


def tunnel_terminator_reply(request: Message, terminator: Terminator) -> Message:
    body = {"terminatorId": terminator.id, "serviceId": terminator.service_id}
    return control.message(control.CREATE_TUNNEL_TERMINATOR_REPLY, body).reply_to(request)


def hosted_services(services: Sequence[HostedService]) -> bytes:
    """A ``HOSTED_SERVICES`` body."""
    return encode(
        {
            "services": [
                {
                    "id": h.service.id,
                    "name": h.service.name,
                    "encryptionRequired": h.service.encryption_required,
                    "host": h.host,
                    "cost": h.cost,
                    "precedence": h.precedence,
                    "instanceId": h.instance_id,
                }
                for h in services
            ]
        }
    )


def api_session(entry: RouterApiSession) -> dict[str, Any]:
    return {
        "id": entry.id,
        "tokenHash": entry.token_hash,
        "identityId": entry.identity_id,
        "identityName": entry.identity_name,
        "fingerprints": list(entry.fingerprints),
    }


def api_sessions_added(
    entries: Sequence[RouterApiSession], *, full_state: bool, chunk: int
) -> Iterator[bytes]:
    """``API_SESSION_ADDED`` bodies of ``chunk`` sessions each (a full state: at least one, the
    last with ``isLast``, even when there are none)."""
    count = len(entries)
    for start in range(0, max(count, 1), chunk):
        part = entries[start : start + chunk]
        last = start + chunk >= count
        yield encode(
            {
                "fullState": full_state,
                "isLast": last or not full_state,
                "apiSessions": [api_session(e) for e in part],
            }
        )


def router_links(others: Sequence[Presence]) -> bytes:
    return encode(
        {
            "routers": [
                {
                    "id": p.router_id,
                    "name": p.name,
                    "linkListener": p.link_listener,
                    "fingerprint": p.fingerprint,
                }
                for p in others
            ]
        }
    )


def ctrl_addresses(endpoints: Sequence[tuple[str, str]]) -> bytes:
    """An ``UPDATE_CTRL_ADDRESSES`` body: every controller's ``(id, tls:host:port)``."""
    return encode(
        {
            "addresses": [address for _, address in endpoints],
            "controllers": [{"id": id, "address": address} for id, address in endpoints],
        }
    )


def signing_keys(jwks: Sequence[Mapping[str, Any]]) -> bytes:
    """A ``SIGNING_KEYS`` body: the public JWKs OIDC access tokens may be signed with."""
    return encode({"keys": [dict(k) for k in jwks]})


def close_circuits(ids: Sequence[str], reason: str) -> bytes:
    """A ``CLOSE_CIRCUITS`` body."""
    return encode({"circuitIds": list(ids), "reason": reason})


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
