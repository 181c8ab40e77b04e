"""What the router's edge side (SDK channels) needs of its control side, and what it offers.

:class:`ControllerPort` is the controller as the edge side sees it (:class:`router.control.
ControlClient` implements it over one control connection, :class:`router.controllers.Controllers`
over one to each controller). :class:`EdgePort` is the edge side as
the control side drives it when the controller pushes a change (:class:`router.edge.EdgeListener`
implements it). :class:`ApiSessions` is the router's copy of the fully authenticated API sessions
the controllers push, with their signing keys and the API sessions they removed: an SDK's hello
is checked against it.
"""

from __future__ import annotations

import asyncio
import hashlib
import platform
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from router.tokens import Revocations, SigningKeys


class Refused(Exception):
    """The controller refused a request: ``code`` is OpenZiti's edge error code (header 1014)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class Unavailable(Exception):
    """The controller could not be asked (no control connection, or no answer in time)."""


@dataclass(frozen=True, slots=True)
class Circuit:
    """The controller's yes to a Connect: the session, who dials, and the terminator to reach."""

    session_id: str
    service_id: str
    service_name: str
    #: The dialing identity's name: the CallerId (1008) a binder is shown.
    caller_id: str
    terminator_id: str
    #: The router the terminator is on (this one, or another reached over a link).
    router_id: str
    binding: str
    address: str
    instance_id: str = ""
    path: tuple[str, ...] = ()
    #: The controller's id of the circuit ("" from a controller that names none): this router
    #: reports it ended (:meth:`ControllerPort.circuits_ended`).
    circuit_id: str = ""


@dataclass(frozen=True, slots=True)
class Terminator:
    """The controller's yes to a Bind."""

    terminator_id: str
    session_id: str
    service_id: str


@dataclass(frozen=True, slots=True)
class HostedService:
    """A service this router hosts itself (one entry of the controller's ``HOSTED_SERVICES``): its
    ``host.v1`` data, and the cost, precedence and instance id its terminator carries."""

    id: str
    name: str
    encryption_required: bool
    host: Mapping[str, Any]
    cost: int = 0
    precedence: str = "default"
    instance_id: str = ""

    @property
    def terminator_options(self) -> tuple[int, str, str]:
        return self.cost, self.precedence, self.instance_id

    @classmethod
    def from_wire(cls, value: Any) -> HostedService:
        if not isinstance(value, dict):
            raise ValueError("a hosted service must be an object")
        service_id, name, host = value.get("id"), value.get("name", ""), value.get("host")
        if not isinstance(service_id, str) or not service_id or not isinstance(name, str):
            raise ValueError("a hosted service needs an id and a name")
        if not isinstance(host, dict):
            raise ValueError(f"hosted service {service_id}: host must be an object")
        cost, precedence, instance_id = value.get("cost", 0), value.get("precedence"), value.get("instanceId")
        if not isinstance(cost, int) or isinstance(cost, bool) or not 0 <= cost <= 65535:
            raise ValueError(f"hosted service {service_id}: cost must be an integer in 0-65535")
        return cls(
            id=service_id,
            name=name,
            encryption_required=value.get("encryptionRequired") is True,
            host=host,
            cost=cost,
            precedence=precedence if isinstance(precedence, str) and precedence else "default",
            instance_id=instance_id if isinstance(instance_id, str) else "",
        )


class ControllerPort(Protocol):
    """The controller, as the edge side asks it (every call may raise :class:`Refused` or
    :class:`Unavailable`)."""

    async def create_circuit(
        self,
        *,
        session_token: str,
        api_session_id: str,
        fingerprints: list[str],
        terminator_instance_id: str,
        has_public_key: bool,
    ) -> Circuit: ...

    async def create_terminator(
        self,
        *,
        session_token: str,
        api_session_id: str,
        fingerprints: list[str],
        instance_id: str,
        cost: int,
        precedence: str,
        has_public_key: bool,
        address: str,
        terminator_id: str = "",
    ) -> Terminator:
        """A terminator for a Bind; ``terminator_id``, chosen by this router, makes asking again
        (another controller, after no answer) return the terminator made the first time."""
        ...

    async def remove_terminators(self, terminator_ids: list[str]) -> None: ...

    def api_session_channels(self, opened: list[str], closed: list[str]) -> None:
        """API sessions whose first SDK channel here just opened, and whose last just closed
        (told, not asked: nothing is raised; lost when there is no control connection)."""
        ...

    def circuits_ended(self, circuit_ids: list[str]) -> None:
        """Circuits this router opened (:attr:`Circuit.circuit_id`) have ended (told, not asked;
        lost when there is no control connection: the next hello lists the circuits still up)."""
        ...


class EdgePort(Protocol):
    """The edge side (SDK channels), as the control side drives it."""

    def end_sessions(self, session_ids: Iterable[str], tokens: Iterable[str]) -> None:
        """Dial/Bind sessions are gone: end their connections and binds (an SDK re-binds)."""
        ...

    def close_api_sessions(self, api_session_ids: Iterable[str]) -> None:
        """API sessions are gone: close every SDK channel opened with them."""
        ...

    def terminator_ids(self) -> list[str]:
        """The terminators this router's binds hold (the hello lists them)."""
        ...

    def drop_terminators(self, terminator_ids: Iterable[str]) -> None:
        """The controller does not know these terminators: end their binds, tell it nothing."""
        ...

    def api_session_ids(self) -> list[str]:
        """The API sessions with an open SDK channel here (their activity report)."""
        ...

    def circuit_ids(self) -> list[str]:
        """The circuits this router opened that are up (the hello lists them)."""
        ...

    def close_circuits(self, circuit_ids: Iterable[str], reason: str) -> None:
        """An administrator deleted these circuits: end their connections (ids not held: ignored)."""
        ...


def version_text(version: str) -> str:
    """The version a hello carries (header 4): five fields ``version|revision|buildDate|os|arch``.
    A ``version`` that has them already is kept; otherwise the other fields are filled in."""
    if version.count("|") == 4:
        return version
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine or "unknown")
    return f"{version.replace('|', '/')}|unknown|unknown|{sys.platform}|{arch}"


def token_hash(token: str) -> str:
    """What the controller sends of an API-session token: lowercase hex SHA-256."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class ApiSession:
    id: str
    token_hash: str
    identity_id: str
    identity_name: str
    #: Lowercase hex SHA-1 fingerprints of the certificates that may open channels with it.
    fingerprints: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_wire(cls, value: Any) -> ApiSession:
        if not isinstance(value, dict):
            raise ValueError("an API session must be an object")
        fields = {k: value.get(k) for k in ("id", "tokenHash", "identityId", "identityName")}
        if not all(isinstance(v, str) and v for v in fields.values()):
            raise ValueError("an API session needs id, tokenHash, identityId and identityName")
        prints = value.get("fingerprints", [])
        if not isinstance(prints, list) or not all(isinstance(p, str) for p in prints):
            raise ValueError("fingerprints must be a list of strings")
        return cls(
            id=value["id"],
            token_hash=value["tokenHash"],
            identity_id=value["identityId"],
            identity_name=value["identityName"],
            fingerprints=frozenset(p.lower() for p in prints),
        )


class ApiSessions:
    """The API sessions the controllers pushed, by token hash and by id (event-loop only).

    Each control connection is a *source* (the router keeps one per controller): its full state
    arrives in chunks kept apart from the others' and replaces everything once its last chunk is
    in; single additions and removals from any source apply at once. ``synced`` is set while at
    least one source's full state has arrived on its current connection; a hello whose token is
    unknown waits for a push (up to a few seconds) before it is refused.

    ``signing_keys`` are the controllers' keys, which OIDC access tokens are verified with, and
    ``revoked`` the sessions removed (by a push, or missing from a full state) whose tokens are
    refused from then on (:mod:`router.tokens`)."""

    def __init__(self) -> None:
        self.signing_keys = SigningKeys()
        self.revoked = Revocations()
        self._by_hash: dict[str, ApiSession] = {}
        self._by_id: dict[str, ApiSession] = {}
        self._incoming: dict[object, dict[str, ApiSession]] = {}
        self._synced: set[object] = set()
        self.synced = asyncio.Event()
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._by_id)

    def by_token(self, token: str) -> ApiSession | None:
        return self._by_hash.get(token_hash(token))

    def by_id(self, session_id: str) -> ApiSession | None:
        return self._by_id.get(session_id)

    def ids(self) -> list[str]:
        return list(self._by_id)

    def put(self, session: ApiSession) -> None:
        old = self._by_id.get(session.id)
        if old is not None:
            self._by_hash.pop(old.token_hash, None)
        self._by_id[session.id] = session
        self._by_hash[session.token_hash] = session
        self.revoked.discard([session.id])
        self._wake()

    def remove(self, session_ids: list[str]) -> list[ApiSession]:
        gone = []
        for session_id in session_ids:
            session = self._by_id.pop(session_id, None)
            if session is not None:
                self._by_hash.pop(session.token_hash, None)
                gone.append(session)
        self.revoked.add(session_ids)
        return gone

    def begin_full_state(self, source: object = None) -> None:
        """A full state starts arriving from ``source``: it replaces everything when its last
        chunk is in."""
        self._incoming[source] = {}

    def add_full_state(
        self, sessions: list[ApiSession], is_last: bool, source: object = None
    ) -> list[ApiSession]:
        """One chunk of ``source``'s full state; on the last, the sessions that are no more (to
        close)."""
        incoming = self._incoming.setdefault(source, {})
        for session in sessions:
            incoming[session.id] = session
        if not is_last:
            return []
        del self._incoming[source]
        gone = [s for i, s in self._by_id.items() if i not in incoming]
        self.revoked.add(s.id for s in gone)
        self.revoked.discard(incoming)
        self._by_id = incoming
        self._by_hash = {s.token_hash: s for s in incoming.values()}
        self._synced.add(source)
        self.synced.set()
        self._wake()
        return gone

    def unsynced(self, source: object = None) -> None:
        """``source``'s control connection is down: what is held stays usable, a new full state
        will come."""
        self._synced.discard(source)
        self._incoming.pop(source, None)
        if not self._synced:
            self.synced.clear()

    async def wait_for_id(self, session_id: str, timeout: float) -> ApiSession | None:
        """The session ``session_id``, waiting up to ``timeout`` s for a push to bring it (not
        at all while no source is synced, nor for a removed one)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = self._by_id.get(session_id)
            if found is not None or session_id in self.revoked or not self.synced.is_set():
                return found
            left = deadline - loop.time()
            if left <= 0:
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return None

    async def wait_for_token(self, token: str, timeout: float) -> ApiSession | None:
        """The session of ``token``, waiting up to ``timeout`` s for a sync or a push to bring it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = self.by_token(token)
            if found is not None:
                return found
            left = deadline - loop.time()
            if left <= 0:
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return None

    def _wake(self) -> None:
        self._changed.set()
