"""The control connection between an edge router and the controller: message types and bodies.

The router dials the controller's control listener over mutual TLS with the client certificate
it got at enrollment; the controller knows the router by that certificate's SHA-1 fingerprint
(the edge router's current ``fingerprint``, so a re-enrolled or extended router's old
certificate is refused at once). Framing is channel v2 (:mod:`channel.frames`); bodies are JSON
objects. Content type numbers are OpenZiti's where the meaning is the same (its edge control
protocol), and header ``ERROR_CODE`` (1014) carries OpenZiti's edge error codes.

Router -> controller:

- ``HELLO`` (0): header 4 = version (``version|revision|buildDate|os|arch``); body
  ``{"hostname", "protocols": {"tls": "tls://host:port"}, "linkListener": "tls://host:port" | "",
  "tunneler": bool, "terminators": [ids the router holds], "circuits": [ids of the circuits the
  router opened that are still up, at most :data:`MAX_HELLO_CIRCUITS`]}`` (the controller forgets
  the router's other circuits). Answered by ``RESULT`` success with
  body ``{"routerId", "routerName", "heartbeatSeconds", "unknownTerminators": [...]}`` (the
  router ends the binds of terminators the controller no longer has, and asks again for those it
  hosts itself; the controller removes this router's ``edge`` and ``tunnel`` terminators the
  router did not list), or ``RESULT`` failure with a reason,
  then close. The hello body may be up to 256 KiB; a second connection of the same router
  replaces the first (the controller closes the older one).
- ``CREATE_CIRCUIT`` (20205), a request: ``{"sessionToken", "apiSessionId", "fingerprints",
  "terminatorInstanceId", "hasPublicKey"}``: may this channel's API session Dial with this
  session here? Answer ``CREATE_CIRCUIT_REPLY`` ``{"circuitId", "sessionId", "serviceId",
  "serviceName", "callerId", "terminator": {"id", "routerId", "binding", "address", "instanceId"},
  "path": [router ids from this router to the terminator's]}`` or ``ERROR``. The controller lists
  the circuit (``/fabric/v1/circuits``) from then until the router reports it ended
  (``CIRCUITS_ENDED``), leaves it out of a hello, or an administrator deletes it.
- ``CREATE_TERMINATOR`` (20207), a request: ``{"sessionToken", "apiSessionId", "fingerprints",
  "instanceId", "cost", "precedence", "hasPublicKey", "address"}``: a Bind. Answer
  ``CREATE_TERMINATOR_REPLY`` ``{"terminatorId", "sessionId", "serviceId"}`` or ``ERROR``. The
  terminator is ``edge``, its address its own id as OpenZiti 1.x's (the ``address`` sent is not
  used); cost 0 and precedence ``default`` take the hosting identity's cost and precedence for
  the service. Each request makes a new terminator: the router removes it when the bind ends.
- ``REMOVE_TERMINATORS`` (20211), a request: ``{"terminatorIds": [...]}``: binds that ended, or
  services the router no longer hosts. Answer ``RESULT``.
- ``CREATE_TUNNEL_TERMINATOR`` (20406, OpenZiti's number), a request of a tunneler router:
  ``{"serviceId", "cost", "precedence", "instanceId"}`` (the last three optional; a
  ``HOSTED_SERVICES`` entry says what to ask): the terminator for a service the router hosts
  itself (``host.v1``). Answer ``CREATE_TUNNEL_TERMINATOR_REPLY`` (20407) ``{"terminatorId",
  "serviceId"}``, or ``ERROR``: code 7 (``ERROR_TUNNELING_NOT_ENABLED``) when the router is not
  tunneler-enabled, 6 when its router identity may not Bind the service or the service has no
  ``host.v1`` config, 9/10 for a bad precedence/cost. The terminator is ``tunnel``, address
  ``tunnel:<serviceId>``, its host the router's identity; there is one per router and service
  (asking again answers the same one, updated to the cost and precedence asked for). A Dial that
  reaches it gets ``binding`` ``tunnel`` in its circuit: the router opens the connection itself.
- ``API_SESSION_HEARTBEAT`` (20203): ``{"apiSessionIds": [...]}``, every minute, the API
  sessions with an open SDK channel on the router (their activity, as an SDK's REST calls). It is
  the whole set: the controller takes it as the router's SDK channels (identities'
  ``hasEdgeRouterConnection``) and answers the ids it no longer knows with ``API_SESSION_REMOVED``.
- ``API_SESSION_CHANNELS`` (21001, Trellis): ``{"opened": [...], "closed": [...]}``, sent when it
  happens, no answer: API sessions whose first SDK channel on the router just opened, and whose
  last just closed (so ``hasEdgeRouterConnection`` follows without waiting for the heartbeat).
  Opened ids the controller does not know are answered with ``API_SESSION_REMOVED``.
- ``LINKS`` (21003, Trellis): ``{"links": [{"id", "routerId", "dialed", "protocol"}]}``, no answer:
  every link to another router that is up on this router (``routerId`` the router at the other
  end, ``dialed`` whether this router dialed it, ``protocol`` ``tls``), at most
  :data:`MAX_LINKS`. Sent after every hello and whenever the set changes; always the whole set.
  The controller keeps it while the connection lasts (``/fabric/v1/links``) and forgets it when the
  router disconnects.
- ``CIRCUITS_ENDED`` (21004, Trellis): ``{"circuitIds": [...]}``, no answer: circuits this router
  opened (``CREATE_CIRCUIT_REPLY``'s ``circuitId``) whose connection has ended, on either side, or
  that could not be set up after all. Ids of other routers' circuits are ignored.
- ``HEARTBEAT`` (5) with header 5 = a uint64 time; answered by ``HEARTBEAT`` with header 6 = the
  same value (and ``REPLY_FOR`` the heartbeat's sequence, so either side may await it). Both sides
  send one every :data:`HEARTBEAT_SECONDS`; either closes a channel silent for
  :data:`SILENT_SECONDS`.

Request bodies that are not the JSON object their type needs are answered ``ERROR`` with code 1
(``ERROR_INTERNAL``); a message of a type the controller does not handle, that is not itself an
answer, too. Refusals with codes 2-5 carry exactly :data:`channel.edge.INVALID_SESSION_TEXT` as
their body (what the C SDK keys on to fetch a new session and retry); the detail is in the
controller's log.

Controller -> router:

- ``API_SESSION_ADDED`` (20200): ``{"fullState": bool, "isLast": bool, "apiSessions": [{"id",
  "tokenHash", "identityId", "identityName", "fingerprints"}]}``: fully authenticated API
  sessions (MFA complete). Only the SHA-256 of a token travels; the router hashes the token an
  SDK's hello carries. A full state comes after the hello in chunks (``isLast`` on the last, also
  when there are none); later messages (``fullState`` false, ``isLast`` true) add or replace
  sessions: one that completes MFA, or whose certificates or identity name change. Every push
  made while a full state is being sent follows its last chunk.
- ``API_SESSION_REMOVED`` (20202): ``{"ids": [...]}``: the router closes every SDK channel opened
  with them.
- ``SESSION_REMOVED`` (20102): ``{"ids": [...], "tokens": [...]}``: the router ends every
  connection and bind opened with those Dial/Bind sessions (``tokens[i]`` is the token of
  ``ids[i]``). The controller has already deleted the terminators those sessions hosted.
- ``ROUTER_LINKS`` (21000, Trellis): ``{"routers": [{"id", "name", "linkListener"}]}``: the other
  online routers and where they take links (several routers); sent after the full state and
  whenever a router comes online or goes offline (``linkListener`` "" when it takes none). The
  routers link to one another as :mod:`channel.link` says.
- ``HOSTED_SERVICES`` (21002, Trellis), to a router whose hello said ``tunneler``:
  ``{"services": [{"id", "name", "encryptionRequired", "host", "cost", "precedence",
  "instanceId"}]}``, sorted by id: every service the router's identity may Bind that has a
  ``host.v1`` config (``host``: that config's data, the identity's service-config override
  first); ``cost``/``precedence``/``instanceId`` are what its terminator should carry (the
  identity's per-service hosting entries, else ``host.listenOptions``, else the identity's
  defaults). Sent after the hello (empty for a router that is not tunneler-enabled) and whenever
  the list changes; always the whole list. The router creates and removes its ``tunnel``
  terminators to match.
- ``CLOSE_CIRCUITS`` (21005, Trellis): ``{"circuitIds": [...], "reason"}``: an administrator
  deleted these circuits of the router (``DELETE /fabric/v1/circuits/{id}``): the router ends their
  connections (StateClosed with the reason to the dialing SDK, and the far end closed), then
  reports them ended. Ids it does not hold are ignored.
- ``UPDATE_CTRL_ADDRESSES`` (1037, OpenZiti's ``UpdateCtrlAddressesType``): ``{"addresses":
  ["tls:host:port", ...], "controllers": [{"id", "address"}]}``: every controller of the network
  (its durable members, online or not) and its control address. Sent after the hello and whenever
  the membership changes (a controller joins, moves, or is removed); always the whole list. The
  router keeps a control connection to each address (adding the new ones, dropping those no longer
  listed) and keeps the list in its directory for its next start; an empty list is ignored.
- ``SIGNING_KEYS`` (21006, Trellis): ``{"keys": [JWK, ...]}``: the public keys OIDC access tokens
  may be signed with, as the controller publishes them at ``/oidc/keys`` (its own, then every
  other controller's of the network; ``kid`` the SHA-1 fingerprint of the controller's
  certificate). Sent right after the hello's answer, before the API-session state (so a router
  holding a controller's state can verify the tokens it names), and whenever the set changes;
  always the whole set. The router verifies SDK hellos and UpdateTokens carrying such a token
  with the union of the latest sets the controllers sent (:mod:`router.tokens`).
- ``ERROR`` (20002): the answer to a refused request: body the reason, header 1014 the code.
"""

from __future__ import annotations

import json
from typing import Any

from channel.edge import ERROR_CODE
from channel.frames import HEARTBEAT, HELLO, RESULT, Message

__all__ = ["HEARTBEAT", "HELLO", "RESULT"]

UPDATE_CTRL_ADDRESSES = 1037
ERROR = 20002
SESSION_REMOVED = 20102
API_SESSION_ADDED = 20200
API_SESSION_UPDATED = 20201
API_SESSION_REMOVED = 20202
API_SESSION_HEARTBEAT = 20203
CREATE_CIRCUIT = 20205
CREATE_CIRCUIT_REPLY = 20206
CREATE_TERMINATOR = 20207
CREATE_TERMINATOR_REPLY = 20208
REMOVE_TERMINATORS = 20211
REMOVE_TERMINATORS_REPLY = 20212
CREATE_TUNNEL_TERMINATOR = 20406
CREATE_TUNNEL_TERMINATOR_REPLY = 20407
ROUTER_LINKS = 21000
API_SESSION_CHANNELS = 21001
HOSTED_SERVICES = 21002
LINKS = 21003
CIRCUITS_ENDED = 21004
CLOSE_CIRCUITS = 21005
SIGNING_KEYS = 21006

#: Seconds between heartbeats, and of silence after which a control channel is closed.
HEARTBEAT_SECONDS = 10.0
SILENT_SECONDS = 30.0
#: Seconds between API-session activity reports.
ACTIVITY_SECONDS = 60.0
#: API sessions per ``API_SESSION_ADDED`` of a full state.
SYNC_CHUNK = 100
#: How long a router waits for an answer from the controller.
REQUEST_SECONDS = 10.0
#: Circuit ids a hello lists at most, and links a ``LINKS`` report holds at most.
MAX_HELLO_CIRCUITS = 4096
MAX_LINKS = 4096


class BadBody(ValueError):
    """A control message whose body is not the JSON object its type needs."""


def message(content_type: int, body: dict[str, Any]) -> Message:
    """A control message with a JSON body."""
    return Message(content_type, json.dumps(body, separators=(",", ":")).encode())


def body_of(msg: Message) -> dict[str, Any]:
    """The JSON object a control message carries (:class:`BadBody` when it is not one)."""
    try:
        value = json.loads(msg.body or b"{}")
    except ValueError as ex:
        raise BadBody(f"content type {msg.content_type}: body is not JSON") from ex
    if not isinstance(value, dict):
        raise BadBody(f"content type {msg.content_type}: body is not a JSON object")
    return value


def strings(body: dict[str, Any], key: str) -> list[str]:
    """``body[key]`` as a list of strings (missing: empty; anything else: :class:`BadBody`)."""
    value = body.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadBody(f"{key} must be a list of strings")
    return value


def text(body: dict[str, Any], key: str, default: str = "") -> str:
    value = body.get(key, default)
    if not isinstance(value, str):
        raise BadBody(f"{key} must be a string")
    return value


def error(request: Message, code: int, reason: str) -> Message:
    """The ``ERROR`` answering ``request``: ``reason`` in the body, ``code`` in header 1014."""
    reply = Message(ERROR, reason.encode())
    reply.set_u32(ERROR_CODE, code)
    return reply.reply_to(request)
