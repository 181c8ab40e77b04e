"""Links between Trellis routers: the messages two routers exchange to carry circuits.

When the controller answers a Connect on router A with a terminator on router B (``path`` [A, B]
in ``CREATE_CIRCUIT_REPLY``), A carries the circuit over its link to B. A link is one TLS
connection between two enrolled routers, framed as channel v2 (:mod:`channel.frames`):

- **Who dials.** The controller lists the other online routers and their link listeners
  (``ROUTER_LINKS``, :mod:`channel.control`). Of two routers that may link, the one with the
  smaller id dials the other; a router that takes no links dials every listed router that does
  (:func:`should_dial`). One link per pair: should two links between the same routers come up,
  both keep the one :func:`preferred` names and close the other.
- **Who is on the other side.** Both present their enrolled certificates and verify the other's
  against the controller's CA (mutual TLS). The dialer checks that the listener's certificate
  names (CN) the router it meant to dial; the listener that the dialer's certificate names a
  router the controller listed (waiting a few seconds for the list to name it), else it closes.
- ``HELLO`` (0), the dialer's first message: body ``{"routerId", "linkId"}`` (its id, as its
  certificate says, and the link's id, made by the dialer: :func:`new_link_id`); answered by
  ``RESULT`` success with body ``{"routerId", "linkId"}`` (the listener's id, and the link's: the
  one the hello named, or a new one when it named none or one that is no :func:`link_id`), or by
  ``RESULT`` failure with the reason and a close. Both routers report the link to the controller
  by that id (``LINKS``, :mod:`channel.control`).

After the hello both sides may open circuits. A circuit is known on the link by its
``CIRCUIT_ID`` header (uint32), chosen by the router that opens it: odd by the link's dialer,
even by its listener, so the two never collide.

- ``DIAL`` (22000), a request from the dialer's router to the terminator's: body ``{"terminatorId",
  "serviceId", "serviceName", "sessionId", "callerId", "binding", "address", "instanceId"}`` (the
  circuit the controller granted, ``callerId`` the dialing identity's name), headers
  ``CIRCUIT_ID`` and, when the dialer sent them, ``PUBLIC_KEY`` (1003) and ``APP_DATA`` (1011).
  The terminator's router dials the terminator (an SDK's bind: Dial, DialSuccess,
  StateConnected) and answers ``RESULT``: success, with the binder's ``PUBLIC_KEY`` when it has
  one and the dialer sent its own; or failure, the reason in the body and OpenZiti's edge error
  code in header ``ERROR_CODE`` (1014).
- ``DATA`` (22002): ``CIRCUIT_ID``, ``FLAGS`` (1010, e.g. FIN) when the SDK set them, the body
  exactly as the SDK sent it (end-to-end encrypted streams depend on it). Either way.
- ``CLOSE`` (22003): ``CIRCUIT_ID``, body the reason (at most :data:`MAX_REASON_BYTES`): the
  sender's end of the circuit is gone (the SDK sent StateClosed, its channel closed, or the dial
  was given up); the receiver ends its side (StateClosed to its SDK) and forgets the circuit.
  Either way; no answer.
- ``CREDIT`` (22004): ``CIRCUIT_ID``, ``CREDIT_BYTES`` (uint32): flow control, per circuit and
  direction. A sender may have at most :data:`WINDOW` bytes of ``DATA`` (:func:`cost`: body plus
  :data:`MESSAGE_COST`) that the receiver has not credited back; past that, it stops reading the
  SDK channel that feeds the circuit. The receiver credits what it has handed to its SDK's
  channel once that channel takes more (a slow reader holds back its own circuit only; the link
  itself is always read), at least every quarter window.
- ``HEARTBEAT`` (5): header 5 = a uint64 time, answered by ``HEARTBEAT`` with header 6 = the same
  value. Both send one every :data:`HEARTBEAT_SECONDS`; a link silent for :data:`SILENT_SECONDS`
  is closed.

A link that closes ends all of its circuits (StateClosed to the SDKs' connections). Messages for
circuits a side no longer knows are dropped (a ``CLOSE`` may cross them).
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from channel.edge import FLAGS
from channel.frames import HEARTBEAT, HELLO, RESULT, Message

__all__ = ["HEARTBEAT", "HELLO", "RESULT"]

DIAL = 22000
DATA = 22002
CLOSE = 22003
CREDIT = 22004

#: Headers (uint32): the circuit a message is about, and the bytes a ``CREDIT`` gives back.
CIRCUIT_ID = 22100
CREDIT_BYTES = 22101

#: Bytes of ``DATA`` a circuit may have uncredited, each way.
WINDOW = 1024 * 1024
#: What each ``DATA`` costs beyond its body (so that empty messages are not free).
MESSAGE_COST = 64
#: Seconds between heartbeats, and of silence after which a link is closed.
HEARTBEAT_SECONDS = 10.0
SILENT_SECONDS = 30.0
#: Circuits one link may carry at once.
MAX_CIRCUITS = 16384
#: Bytes of a close reason carried.
MAX_REASON_BYTES = 512
#: Bound of a link hello's body.
MAX_HELLO_BODY_BYTES = 4096


def should_dial(me: str, my_listener: str, peer: str, peer_listener: str) -> bool:
    """Whether router ``me`` dials the link to ``peer``: the peer takes links, and either ``me``
    has the smaller id or takes none itself."""
    return bool(peer_listener) and (me < peer or not my_listener)


def preferred(dialer_a: str, dialer_b: str) -> str:
    """Of two links between the same routers, dialed by ``dialer_a`` and ``dialer_b``, the dialer
    of the one to keep (the smaller id: what :func:`should_dial` picks when both take links)."""
    return min(dialer_a, dialer_b)


#: What a link id may be: OpenZiti's short-id alphabet, 1 to 64 characters.
_LINK_ID = re.compile(r"[0-9A-Za-z.\-]{1,64}")
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-"


def new_link_id() -> str:
    """A new link id: twelve random characters of OpenZiti's short-id alphabet."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(12))


def link_id(value: Any) -> str | None:
    """``value`` if it is a well-formed link id, else None."""
    return value if isinstance(value, str) and _LINK_ID.fullmatch(value) else None


def hello(router_id: str, link: str) -> Message:
    return Message(HELLO, json.dumps({"routerId": router_id, "linkId": link}).encode())


def dial(circuit_id: int, body: dict[str, Any]) -> Message:
    message = Message(DIAL, json.dumps(body, separators=(",", ":")).encode())
    return message.set_u32(CIRCUIT_ID, circuit_id)


def data(circuit_id: int, body: bytes, flags: bytes | None) -> Message:
    message = Message(DATA, body).set_u32(CIRCUIT_ID, circuit_id)
    if flags is not None:
        message.headers[FLAGS] = flags
    return message


def close(circuit_id: int, reason: str) -> Message:
    body = reason.encode()[:MAX_REASON_BYTES]
    return Message(CLOSE, body).set_u32(CIRCUIT_ID, circuit_id)


def credit(circuit_id: int, amount: int) -> Message:
    return Message(CREDIT).set_u32(CIRCUIT_ID, circuit_id).set_u32(CREDIT_BYTES, amount)


def cost(message: Message) -> int:
    """What a ``DATA`` message counts against its circuit's window."""
    return len(message.body) + MESSAGE_COST
