"""What a router decides alone while no controller can be reached: :class:`Offline`.

A router asks a controller about every Dial (``CREATE_CIRCUIT``) and every Bind
(``CREATE_TERMINATOR``). When none can be asked (every control connection is down, or none
answered in time), connections already established go on regardless: nothing here, nor in the
control side, closes them. Once no control connection is up (not merely no answer), for a
bounded time, the *grace* (``TRELLIS_ROUTER_OFFLINE_GRACE``, :data:`DEFAULT_GRACE_SECONDS` by
default, 0: never), the router also decides alone from what it holds:

- **hellos**: an SDK channel opens with an API session the controllers pushed
  (:class:`~router.ports.ApiSessions`), as when they are there; past the grace it is refused
  (closed unanswered, as for an unknown API session).
- **Dials**: a Dial with a session token the controller granted here before (a :class:`Grant`,
  remembered from each ``CREATE_CIRCUIT`` answer), from the same API session, is served when a
  terminator of the grant's service is at hand: an SDK's bind on this router, a service this
  router hosts, or a terminator on another router the controller chose for that service before,
  over a link that is up. Anything else is refused with OpenZiti's answer for a router with no
  controller: StateClosed ``no controller available, cannot create circuit``
  (:data:`NO_CONTROLLER_CIRCUIT`), with no error code, as OpenZiti v1.6.0's router sends it.
- **Binds** are never decided alone (a terminator lives at the controller):
  ``no controller available, cannot create terminator``.

Grants are forgotten when a pushed removal names them (their session, or their API session, is
gone), and all of them when a controller is reachable again after none was: a removal made
while the router heard nothing never reached it, so what it learned before is not trusted twice.
They are learned again from the next Dials. At most :data:`MAX_GRANTS` are kept (the oldest
go first).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from router.ports import Circuit, token_hash

log = logging.getLogger(__name__)

#: The grace by default: OpenZiti's default lifetime of an API session without activity and of an
#: OIDC access token (30 minutes), the time an OpenZiti HA router goes on trusting a token alone.
DEFAULT_GRACE_SECONDS = 1800.0
#: Grants kept at most (the oldest are forgotten first).
MAX_GRANTS = 50_000
#: Terminators on other routers kept for one service at most.
MAX_FAR_TERMINATORS = 16

#: OpenZiti's router's answers to a Connect and a Bind when it has no controller to ask
#: (``router/xgress_edge/listener.go``; no error code header).
NO_CONTROLLER_CIRCUIT = "no controller available, cannot create circuit"
NO_CONTROLLER_TERMINATOR = "no controller available, cannot create terminator"


@dataclass(frozen=True, slots=True)
class Grant:
    """A Dial the controller granted on this router: what serving the next one alone needs (the
    session token is kept as its SHA-256 only, as API-session tokens are)."""

    token_hash: str
    session_id: str
    api_session_id: str
    service_id: str
    service_name: str
    #: The dialing identity's name (the CallerId a binder is shown).
    caller_id: str
    #: Whether the Dial granted sent a public key: then the router cannot tell whether the service
    #: requires end-to-end encryption, and serves alone only Dials that send one too.
    with_key: bool


@dataclass(frozen=True, slots=True)
class FarTerminator:
    """A terminator on another router that the controller chose for a service."""

    id: str
    router_id: str
    binding: str
    address: str
    instance_id: str


class Offline:
    """Whether a controller can be reached, since when not, and the grants learned meanwhile.

    :meth:`reachable` is called when the first control connection comes up (from none),
    :meth:`unreachable` when the last goes (:attr:`router.controllers.Controllers.on_reachable`).
    A router starts unreachable. Event-loop only."""

    def __init__(
        self,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        *,
        max_grants: int = MAX_GRANTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if grace_seconds < 0:
            raise ValueError("the grace cannot be negative")
        self.grace_seconds = grace_seconds
        self.max_grants = max_grants
        self._clock = clock
        #: When the last control connection went (the start, before any): None while one is up.
        self._since: float | None = clock()
        #: Whether a controller was ever reachable (before: nothing held, nothing to say).
        self._ever = False
        self._grants: OrderedDict[str, Grant] = OrderedDict()
        self._far: dict[str, dict[str, FarTerminator]] = {}
        self._lapse: asyncio.TimerHandle | None = None

    # -- reachability --------------------------------------------------------------------------
    @property
    def is_reachable(self) -> bool:
        return self._since is None

    def absent_for(self) -> float:
        """Seconds since the last control connection went (0 while one is up)."""
        return 0.0 if self._since is None else max(0.0, self._clock() - self._since)

    def within_grace(self) -> bool:
        """Whether the router may decide a Dial alone now: no controller has been reachable for
        less than the grace. (One that is connected but does not answer decides nothing: its
        connection is closed once silent, and then the grace runs.)"""
        return self._since is not None and self.absent_for() < self.grace_seconds

    def admits_hellos(self) -> bool:
        """Whether a held API session may open a new SDK channel now."""
        return self._since is None or self.absent_for() < self.grace_seconds

    def reachable(self) -> None:
        """A control connection is up (the first of them)."""
        if self._since is None:
            return
        away = self.absent_for()
        self._since = None
        self._cancel_lapse()
        if self._ever and (self._grants or self._far):
            log.info(
                "offline: a controller is back after %.1f s: forgetting %d grants learned before",
                away,
                len(self._grants),
            )
        elif self._ever:
            log.info("offline: a controller is back after %.1f s", away)
        self._ever = True
        self.clear()

    def unreachable(self) -> None:
        """The last control connection is down."""
        if self._since is not None:
            return
        self._since = self._clock()
        if self.grace_seconds <= 0:
            log.warning(
                "offline: no controller reachable: established connections go on; new SDK channels "
                "and Dials are refused until one is back (TRELLIS_ROUTER_OFFLINE_GRACE is 0)"
            )
            return
        log.warning(
            "offline: no controller reachable: established connections go on; for %g s this router "
            "admits held API sessions and serves Dials it was granted before (%d grants held)",
            self.grace_seconds,
            len(self._grants),
        )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._cancel_lapse()
        self._lapse = loop.call_later(self.grace_seconds, self._lapsed)

    def _lapsed(self) -> None:
        self._lapse = None
        if self._since is not None:
            log.warning(
                "offline: no controller for %g s: the grace is over; established connections go on, "
                "new SDK channels and Dials are refused until a controller is back",
                self.grace_seconds,
            )

    def _cancel_lapse(self) -> None:
        if self._lapse is not None:
            self._lapse.cancel()
            self._lapse = None

    def close(self) -> None:
        self._cancel_lapse()

    # -- grants --------------------------------------------------------------------------------
    def remember(
        self, token: str, api_session_id: str, circuit: Circuit, *, with_key: bool, router_id: str
    ) -> None:
        """The controller granted a Dial with ``token`` here (``circuit``, its answer)."""
        if not token or not circuit.service_id:
            return
        key = token_hash(token)
        self._grants.pop(key, None)
        self._grants[key] = Grant(
            token_hash=key,
            session_id=circuit.session_id,
            api_session_id=api_session_id,
            service_id=circuit.service_id,
            service_name=circuit.service_name,
            caller_id=circuit.caller_id,
            with_key=with_key,
        )
        while len(self._grants) > self.max_grants:
            self._grants.popitem(last=False)
        if circuit.router_id and circuit.router_id != router_id and circuit.terminator_id:
            far = self._far.setdefault(circuit.service_id, {})
            far.pop(circuit.terminator_id, None)
            far[circuit.terminator_id] = FarTerminator(
                id=circuit.terminator_id,
                router_id=circuit.router_id,
                binding=circuit.binding,
                address=circuit.address,
                instance_id=circuit.instance_id,
            )
            while len(far) > MAX_FAR_TERMINATORS:
                del far[next(iter(far))]
            if len(self._far) > self.max_grants:
                del self._far[next(iter(self._far))]

    def grant(self, token: str) -> Grant | None:
        return self._grants.get(token_hash(token))

    def grants(self) -> list[Grant]:
        """Every grant held (tests, diagnostics)."""
        return list(self._grants.values())

    def far_terminators(self, service_id: str) -> list[FarTerminator]:
        """The terminators on other routers the controller chose for ``service_id``, newest last."""
        return list(self._far.get(service_id, {}).values())

    def forget_sessions(self, session_ids: Iterable[str], tokens: Iterable[str]) -> None:
        """Sessions ended (a pushed removal): their grants go."""
        ids, hashes = set(session_ids), {token_hash(t) for t in tokens}
        for key, grant in list(self._grants.items()):
            if key in hashes or grant.session_id in ids:
                del self._grants[key]

    def forget_api_sessions(self, api_session_ids: Iterable[str]) -> None:
        """API sessions ended (a pushed removal, or absent from a full state): their grants go."""
        ids = set(api_session_ids)
        if not ids:
            return
        for key, grant in list(self._grants.items()):
            if grant.api_session_id in ids:
                del self._grants[key]

    def clear(self) -> None:
        self._grants.clear()
        self._far.clear()
