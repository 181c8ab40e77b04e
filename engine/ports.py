"""Ports: the interfaces the engine needs from the outside world.

``storage`` implements :class:`Store`; ``pki`` implements :class:`PasswordHasher`,
:class:`CertificateAuthority`, :class:`TokenSigner`, :class:`TotpService` and
:class:`ExternalJwtVerifier`; the composition root (``controller/app.py``)
supplies a :class:`Clock` and an :class:`IdGenerator`. ``engine.testing`` ships cheap fakes of
the clock, the ids and the hasher for tests.

Certificates cross the boundary as PEM text; what the engine needs to know of one is a
:class:`CertInfo` that ``pki`` parsed, so the engine never touches X.509 itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar

from engine.entities import Entity
from engine.query.plan import ListIndex

E = TypeVar("E", bound=Entity)


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC, millisecond precision."""
        ...


class IdGenerator(Protocol):
    def new_id(self) -> str:
        """A short opaque entity id (OpenZiti shortid style)."""
        ...

    def new_token(self) -> str:
        """A random UUIDv4 string (API session tokens, enrollment tokens)."""
        ...


class PasswordHasher(Protocol):
    def hash(self, password: str) -> str:
        """A self-describing encoded hash of ``password`` with a fresh salt."""
        ...

    def verify(self, password: str, encoded: str) -> bool:
        """Whether ``password`` matches ``encoded``; never raises (a malformed encoding does not
        match)."""
        ...

    def needs_rehash(self, encoded: str) -> bool:
        """Whether ``encoded`` was not made as :meth:`hash` makes hashes now (another algorithm or
        other parameters): a login that proved the password then stores a new hash."""
        ...


#: What a certificate is issued for: an identity's client certificate, a router's server
#: certificate (serverAuth + clientAuth, with SANs) or a router's client certificate.
CertProfile = Literal["client", "server", "router"]


@dataclass(frozen=True)
class CertInfo:
    """The facts of one X.509 certificate the engine decides on (parsed by ``pki``)."""

    pem: str
    #: OpenZiti's fingerprint: lowercase hex SHA-1 of the DER, no separators.
    fingerprint: str
    common_name: str | None
    not_before: datetime
    not_after: datetime
    is_ca: bool
    #: The subject as an RFC 4514 string, and the SAN URIs and e-mail addresses (CA auto-enrollment
    #: reads an external id from them).
    subject: str = ""
    uris: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    #: Lowercase hex SHA-256 of the SubjectPublicKeyInfo: equal for two certificates of one key.
    public_key_id: str = ""

    def is_valid_at(self, moment: datetime) -> bool:
        return self.not_before <= moment <= self.not_after


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate our CA just signed."""

    info: CertInfo
    #: The leaf then our signing (intermediate) CA, PEM: what enrollment answers carry as ``cert``.
    chain_pem: str

    @property
    def pem(self) -> str:
        return self.info.pem

    @property
    def fingerprint(self) -> str:
        return self.info.fingerprint


class CertificateAuthority(Protocol):
    """The controller's PKI: signs CSRs, parses and checks certificates (implemented in ``pki``).

    Every parse or check failure raises a ``ControllerError`` (``FieldError`` on the named
    ``field`` unless stated), never a library exception.
    """

    def ca_bundle_pem(self) -> str:
        """Our CA certificates (root, then signing CA), PEM: enrollment answers' ``ca``."""
        ...

    def sign_csr(
        self,
        csr: str,
        *,
        profile: CertProfile,
        common_name: str,
        validity: timedelta,
        now: datetime,
        sans: Sequence[str] = (),
        field: str = "csr",
    ) -> IssuedCertificate:
        """Issue a certificate for a CSR (PEM, or base64/raw DER as text).

        Lenient with how real SDKs encode CSRs (mbedTLS's explicit NULL parameters), strict about
        the key (RSA >= 2048, EC, Ed25519) and the CSR's self-signature. The subject is ours
        (``common_name``), never the CSR's; ``server``/``router`` profiles carry ``sans``.
        """
        ...

    def parse_certificate(self, pem: str, *, field: str = "certPem") -> CertInfo:
        """The first certificate of ``pem``."""
        ...

    def parse_certificates(self, pem: str, *, field: str = "certPem") -> list[CertInfo]:
        """Every certificate of ``pem``, in order."""
        ...

    def parse_ca_certificate(self, pem: str, *, field: str = "certPem") -> CertInfo:
        """A CA certificate (``CERTIFICATE_IS_NOT_CA`` when it lacks CA:TRUE)."""
        ...

    def issued_by_us(self, chain: Sequence[str], *, client_auth: bool = True) -> bool:
        """Whether ``chain`` (leaf first, PEM) is signed by our signing CA (signature checked).
        ``client_auth``: the leaf and the CAs on its path must also allow TLS client
        authentication (an extendedKeyUsage, where present, with clientAuth)."""
        ...

    def issuer_index(
        self, chain: Sequence[str], ca_pems: Sequence[str], *, client_auth: bool = True
    ) -> int | None:
        """Which of ``ca_pems`` issued the leaf of ``chain``, or None.

        The leaf may be signed directly by the CA or through intermediates that ``chain``
        carries after it; every signature on the way is checked. Dates are not checked. A leaf
        with a critical extension Trellis does not handle is never issued; ``client_auth`` as
        for :meth:`issued_by_us`.
        """
        ...


class TokenSigner(Protocol):
    """Signs the controller's JWTs (enrollment JWTs) with the API listener's TLS key."""

    def sign(self, claims: Mapping[str, Any]) -> str:
        """A compact JWS of ``claims`` (``alg`` from the key, ``kid`` = SHA-1 of the certificate)."""
        ...

    def public_jwks(self) -> list[dict[str, Any]]:
        """The public JSON Web Keys (RFC 7517) of the keys that sign, each with its ``kid``."""
        ...

    def sign_detached(self, payload: bytes, kid: str) -> tuple[str, str] | None:
        """``(alg, signature)``: the JWS signature (base64url) of ``payload`` by the key ``kid``,
        or None when no signing key has that ``kid``."""
        ...


class TotpService(Protocol):
    """Time-based one-time passwords (RFC 6238, 6 digits, 30 s steps) and MFA recovery codes."""

    def new_secret(self) -> str:
        """A new base32 TOTP secret (OpenZiti issues 10 random bytes: 16 characters)."""
        ...

    def new_recovery_codes(self) -> list[str]:
        """A fresh set of single-use recovery codes (OpenZiti: 20 codes of 6 base32 characters)."""
        ...

    def step(self, secret: str, code: str, at: datetime) -> int | None:
        """The time step (RFC 6238's ``T``) whose TOTP of ``secret`` is ``code``, searched within
        the accepted window around ``at``; None when ``code`` is no such code."""
        ...

    def provisioning_url(self, secret: str, account: str) -> str:
        """The ``otpauth://totp/...`` URL an authenticator app enrolls from."""
        ...


@dataclass(frozen=True)
class Lockout:
    """At most ``max_attempts`` failed-or-pending guesses (0: no limit); the caller locks out."""

    max_attempts: int


@dataclass(frozen=True)
class Backoff:
    """``free`` failures, then one guess at a time, the wait doubling from ``base`` to ``cap``
    seconds after each further failure."""

    free: int
    base: float
    cap: float


@dataclass(frozen=True)
class Attempt:
    """A guess's place in an :class:`Attempts` ledger; ``granted`` False: refused unchecked."""

    key: str
    granted: bool
    #: For a refused guess under a backoff: the seconds until one may be taken again.
    retry_after: float | None = None


class Attempts(Protocol):
    """Guesses at secrets counted before they are checked (implemented in ``engine.attempts``).

    ``at`` is the caller's clock in seconds. Each granted :class:`Attempt` must be settled once:
    :meth:`fail`, :meth:`succeed` or :meth:`abandon`.
    """

    def begin(self, key: str, at: float, rule: Lockout | Backoff) -> Attempt: ...

    def fail(self, attempt: Attempt, at: float, rule: Lockout | Backoff) -> int:
        """Count a failed guess; the failures of its key since the last success."""
        ...

    def succeed(self, attempt: Attempt) -> None:
        """A right guess: its key's failures and wait are cleared."""
        ...

    def abandon(self, attempt: Attempt) -> None:
        """The check could not run: the place is given back, nothing counted."""
        ...

    def failures(self, key: str) -> int: ...

    def forget(self, key: str) -> None:
        """Clear a key's failures and wait (after a lockout, which then holds the identity)."""
        ...

    def claim(self, key: str, value: int, at: float) -> bool:
        """Record ``value`` for ``key`` if above every value claimed before; else False."""
        ...


class ActivityBoard(Protocol):
    """When each API session was last used, shared by the processes serving one database.

    An API session's activity is kept in its process's memory and written to the session only
    now and then (``engine.managers.api_sessions``): a process that shares its store with others
    (PostgreSQL, several workers) also notes it here, so that another process about to end a
    session as expired (its purge, or a request it got) first learns whether it was used
    elsewhere since. A store only one process opens needs none (:class:`NoActivityBoard`)."""

    def note(self, session_id: str, when: datetime) -> None:
        """``session_id`` was used at ``when`` (cheap: shared in the background)."""
        ...

    def latest(self, session_ids: Sequence[str]) -> dict[str, datetime]:
        """The last use other processes shared of each of ``session_ids`` that has one."""
        ...

    def forget(self, session_ids: Sequence[str]) -> None:
        """These sessions have ended: drop what is known of them."""
        ...


class NoActivityBoard:
    """The :class:`ActivityBoard` of a store only one process opens: nothing to share."""

    def note(self, session_id: str, when: datetime) -> None:
        return None

    def latest(self, session_ids: Sequence[str]) -> dict[str, datetime]:
        return {}

    def forget(self, session_ids: Sequence[str]) -> None:
        return None


#: A process's fleet as it shares it (:meth:`engine.managers.fleet.Fleet.export`): plain JSON.
FleetState = dict[str, Any]


class FleetBoard(Protocol):
    """Which routers are connected to the other processes that share the store.

    A router keeps its control connection to one process of each controller (the one that leads,
    ``Store.lead``), yet every process answers ``isOnline``, a session's routers and the fabric's
    links. Each process's fleet (``engine.managers.fleet``) shares its own connections here and
    takes the others'. A store only one process opens has nothing to share (:class:`NoFleetBoard`)."""

    def attach(self, export: Callable[[], FleetState], absorb: Callable[[list[FleetState]], None]) -> None:
        """Share what ``export`` returns (now, after :meth:`changed`, and now and then so that it
        does not expire), and hand ``absorb`` what the other live processes share, when it changes
        (on the board's own thread)."""
        ...

    def changed(self) -> None:
        """What ``export`` returns has changed (cheap: shared in the background, soon)."""
        ...


class NoFleetBoard:
    """The :class:`FleetBoard` of a store only one process opens: nothing to share."""

    def attach(self, export: Callable[[], FleetState], absorb: Callable[[list[FleetState]], None]) -> None:
        return None

    def changed(self) -> None:
        return None


#: An identity's posture data as it is shared (``engine.managers.posture.sharing``): plain JSON.
PostureState = dict[str, Any]


class PostureBoard(Protocol):
    """Identities' posture data, shared by the processes serving one database.

    Posture data is kept in memory (``engine.managers.posture``); an SDK's responses reach one
    process and its session requests any. Each process publishes an identity's data when it
    changes and takes in what the others publish; one about to refuse a session for posture
    reads the identity's latest first. A store only one process opens has nothing to share
    (:class:`NoPostureBoard`)."""

    #: Whether other processes read what is published (nothing need be made for them if not).
    shares: bool

    def attach(self, absorb: Callable[[dict[str, PostureState]], None]) -> None:
        """Hand ``absorb`` what other processes publish (identity id -> state), as it comes (on
        the board's own thread)."""
        ...

    def publish(self, identity_id: str, state: PostureState) -> None:
        """This process changed the identity's data: shared before this returns where the
        database answers (a session request to another process right after must count it)."""
        ...

    def latest(self, identity_id: str) -> PostureState | None:
        """The identity's data as last published by any process (None when none has, or the
        board cannot tell now)."""
        ...

    def forget(self, identity_id: str) -> None:
        """The identity is gone: drop what is published of it."""
        ...


class NoPostureBoard:
    """The :class:`PostureBoard` of a store only one process opens: nothing to share."""

    shares = False

    def attach(self, absorb: Callable[[dict[str, PostureState]], None]) -> None:
        return None

    def publish(self, identity_id: str, state: PostureState) -> None:
        return None

    def latest(self, identity_id: str) -> PostureState | None:
        return None

    def forget(self, identity_id: str) -> None:
        return None


#: Requests admitted against clients' budgets, by (kind, client key): ``("auth", address)``,
#: ``("write", "session:<id>")``... (``api.limits``).
RateSpending = dict[tuple[str, str], int]


class RateBoard(Protocol):
    """What clients spend of their request budgets (``TRELLIS_RATE_*``) on each process serving
    one database, shared so that a budget holds for the whole cluster, not per process.

    Every round (a fraction of a second) the board takes what this process admitted since the
    last round (``export``) and shares it, and hands ``absorb`` what the other processes admitted
    since it last did, with how many processes share the budgets now (this one included; 1 when
    the others cannot be heard). Nothing of it is on a request's path. A store only one process
    opens has nothing to share (:class:`NoRateBoard`): its budgets stay the process's own."""

    def attach(self, export: Callable[[], RateSpending], absorb: Callable[[RateSpending, int], None]) -> None:
        """Start the rounds (on the board's own thread)."""
        ...


class NoRateBoard:
    """The :class:`RateBoard` of a store only one process opens: nothing to share."""

    def attach(self, export: Callable[[], RateSpending], absorb: Callable[[RateSpending, int], None]) -> None:
        return None


@dataclass(frozen=True)
class AccessChangeRow:
    """One access-relevant batch's access changes as the access-change log keeps them
    (``engine.analysis.stream``): its revision, the revision of the access-relevant batch before
    it (``prev``: the chain that tells a reader nothing is missing), when it was committed, how
    many pairs it changed and everything else as one opaque, compressed document."""

    revision: int
    prev: int
    committed_at: datetime
    pairs: int
    doc: bytes


class AccessChangeLog(Protocol):
    """Where the access changes of each batch are kept, durable and shared by every process of
    the store, for the change stream of docs/analysis.md §15 (thread-safe; outside the change
    log and the group commit: a row is written after its batch is published)."""

    def append(self, row: AccessChangeRow) -> bool:
        """Keep ``row`` unless one of its revision is kept already; whether it was added (False
        too when the store did not answer: the caller keeps the row and tries again)."""
        ...

    def read(self, after: int, limit: int) -> list[AccessChangeRow]:
        """Up to ``limit`` rows with a revision above ``after``, oldest first."""
        ...

    def bounds(self) -> tuple[AccessChangeRow | None, AccessChangeRow | None]:
        """The oldest and the newest row kept (None, None for none)."""
        ...

    def trim(self, before: datetime) -> int:
        """Drop the rows committed before ``before`` but the newest; how many went."""
        ...


class CommitTimes(Protocol):
    """When the change log's batches were committed, as every process of one database tells it.

    Each process applies a batch when it commits it or hears of it, so a time it takes from its
    own clock differs from the others' by their lag; the batch's number (``seq``, the last change
    of the batch) and its commit time are the same everywhere. ``engine.managers.service_updates``
    dates what it marks by them. A store only one process opens has nothing to share
    (:class:`LocalCommitTimes`: the process's clock is the only one)."""

    #: Whether the times come from the store (else: None everywhere, the caller's clock rules).
    shared: bool

    def at(self, seq: int) -> datetime | None:
        """When the batch ending at change ``seq`` was committed (if the log no longer has it,
        the next one still there); None when it cannot be told now."""
        ...

    def started(self) -> datetime | None:
        """This process starts: it knows nothing of what was marked before, so the shared epoch
        (:meth:`epoch`) moves up to now (the store's clock, as commit times), returned; None
        when the store cannot be told now."""
        ...

    def epoch(self) -> datetime | None:
        """The latest time a process of the store started (:meth:`started`), as last read (at
        most a second old)."""
        ...


class LocalCommitTimes:
    """The :class:`CommitTimes` of a store only one process opens: its clock rules."""

    shared = False

    def at(self, seq: int) -> datetime | None:
        return None

    def started(self) -> datetime | None:
        return None

    def epoch(self) -> datetime | None:
        return None


@dataclass(frozen=True)
class JwtKeySource:
    """Where an external JWT signer's public keys come from: one certificate or a JWKS endpoint."""

    cert_pem: str | None = None
    jwks_endpoint: str | None = None
    #: The ``kid`` a certificate signer's tokens carry (its fingerprint when not configured).
    kid: str | None = None


@dataclass(frozen=True)
class UnverifiedJwt:
    """A compact JWS's header and claims, read without checking anything."""

    header: dict[str, Any]
    claims: dict[str, Any]

    @property
    def kid(self) -> str | None:
        value = self.header.get("kid")
        return value if isinstance(value, str) and value else None


class ExternalJwtVerifier(Protocol):
    """Signature checks of JWTs issued by external identity providers (implemented in ``pki``).

    Only the cryptography lives behind this port: which signer, issuer, audience, expiry and
    identity a token stands for are the engine's decisions.
    """

    def peek(self, token: str) -> UnverifiedJwt | None:
        """The token's header and claims unverified, or None when it is not a JWS."""
        ...

    def verify(self, token: str, source: JwtKeySource) -> dict[str, Any] | None:
        """The claims when the token's signature verifies with ``source``'s key for its ``kid``.

        A JWKS is fetched with a timeout and cached; an unknown ``kid`` refetches it (at most
        once a second per endpoint). None when no key verifies the signature. Claims are not
        checked (``exp``, ``aud``... are the caller's).
        """
        ...


class UnconfiguredTotp:
    """The :class:`TotpService` of an environment built without one: every use fails."""

    _MESSAGE = "no TOTP service is configured"

    def new_secret(self) -> str:
        raise RuntimeError(self._MESSAGE)

    def new_recovery_codes(self) -> list[str]:
        raise RuntimeError(self._MESSAGE)

    def step(self, secret: str, code: str, at: datetime) -> int | None:
        raise RuntimeError(self._MESSAGE)

    def provisioning_url(self, secret: str, account: str) -> str:
        raise RuntimeError(self._MESSAGE)


class UnconfiguredJwtVerifier:
    """The :class:`ExternalJwtVerifier` of an environment built without one: nothing verifies."""

    def peek(self, token: str) -> UnverifiedJwt | None:
        return None

    def verify(self, token: str, source: JwtKeySource) -> dict[str, Any] | None:
        return None


@dataclass(frozen=True)
class SchemaViolation:
    """The first way a document fails a JSON schema, in the terms of the schema keyword."""

    path: tuple[str | int, ...]
    keyword: str
    instance: Any
    expected: Any
    schema: Any
    message: str


class SchemaChecker(Protocol):
    """JSON Schema validation (config types' schemas and configs' data)."""

    def schema_error(self, schema: dict[str, Any]) -> str | None:
        """Why ``schema`` is not a valid JSON schema, or None when it is."""
        ...

    def first_violation(self, schema: dict[str, Any], data: Any) -> SchemaViolation | None:
        """The most relevant way ``data`` fails ``schema``, or None when it conforms."""
        ...


@dataclass(frozen=True)
class Put:
    entity: Entity


@dataclass(frozen=True)
class Delete:
    kind: type[Entity]
    id: str


Change = Put | Delete


class StoreView(Protocol):
    """Entities by kind as of one moment: reads only."""

    def get(self, kind: type[E], id: str) -> E | None: ...

    def all(self, kind: type[E]) -> list[E]: ...

    def count(self, kind: type[Entity]) -> int: ...

    def find_unique(self, kind: type[E], field: str, value: object) -> E | None:
        """The entity whose unique ``field`` (one of ``kind.UNIQUE``) equals ``value``."""
        ...

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        """Entities whose indexed ``field`` (one of ``kind.INDEXED``) equals ``value``."""
        ...


@dataclass(frozen=True)
class LogProblem:
    """A disagreement between the change log and the tables."""

    description: str
    #: The entity kind (``Entity.ENTITY``) and id whose newest log entry is wrong, if one is.
    kind: str | None = None
    id: str | None = None


class Durable(Protocol):
    """A write staged but not yet known durable (see :meth:`Store.deferring`)."""

    #: Why its batch was refused (``None`` while pending or once durable and published).
    error: BaseException | None

    def when_done(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once the batch is durable and published, or refused (any thread;
        at once if that has already happened)."""
        ...


#: Called with each committed batch's changes (one per key, the last of the batch), in order.
CommitListener = Callable[[list[Change]], None]


class Store(StoreView, Protocol):
    """Entities by kind, served from memory and written through to durable storage.

    Writes go through one group-commit path. A writer holds :meth:`write_lock` while it reads,
    checks and stages its changes (:meth:`commit`); what it reads under the lock includes what
    earlier writers staged. Staged changes are committed in batches, in order, each batch in one
    durable transaction together with its change-log entries. Only after a batch is durable are
    its changes published: the read side and the listeners (:meth:`subscribe`; the policy engine)
    take the whole batch at once, and then its writers are answered. A writer is answered when it
    leaves the outermost :meth:`write_lock` (or, committing without the lock, when ``commit``
    returns): by then what it staged is durable and visible, or :class:`CommitFailedError` is
    raised and none of it (nor anything staged after it) was applied.

    Readers not holding the write lock see published batches only, never half of one; a request
    pinned with :meth:`pinned` sees one batch's state throughout (and its own writes after them).
    """

    def commit(self, changes: Sequence[Change], *, wait: bool = True) -> None:
        """Stage ``changes`` for the next batch (taking the write lock when not held). With
        ``wait`` the caller is answered only after they are durable and published (at the
        outermost lock's exit, when held); without it they are committed in the background."""
        ...

    def try_submit(self, build: Callable[[StoreView], Sequence[Change]]) -> bool:
        """Best-effort background writes off the read path (activity refreshes): when no writer
        holds the write lock, stage what ``build`` returns (reading the staged state) without
        waiting for it; False, writing nothing, when the lock is busy."""
        ...

    def write_lock(self) -> AbstractContextManager[object]:
        """Serialises writers: read-check-stage sequences run under it (re-entrant)."""
        ...

    def view(self) -> StoreView:
        """The published state as of now: an immutable view of whole batches."""
        ...

    def list_index(self, kind: type[E]) -> ListIndex[E]:
        """``kind``'s whole collection as its list reads it (in the order of :meth:`all`, from what
        this thread reads: the pinned state, or the staged one under the write lock), with lookups
        by ``id``, the ``UNIQUE`` and ``INDEXED`` fields and each value of the ``MULTI_INDEXED``."""
        ...

    def pinned(self) -> AbstractContextManager[object]:
        """Read one published state for the duration (a request), refreshed after own writes."""
        ...

    def deferring(self, into: list[Durable]) -> AbstractContextManager[object]:
        """For the duration, on this thread, a write is not waited for where it would be (the
        outermost :meth:`write_lock`'s exit, ``commit``): its pending batch goes to ``into``
        instead, and the caller must not answer before each is done and has no ``error``.

        For a request served where it must not block (the server's event loop) whose answer does
        not read its own write back: reads go on seeing the state as it was before the write."""
        ...

    def subscribe(self, listener: CommitListener) -> None:
        """Call ``listener`` with every published batch, in order, before its writers are answered
        (on the store's committer; a listener may commit more changes: they go to a later batch)."""
        ...

    def change_log_problems(self) -> list[LogProblem]:
        """Where the durable change log disagrees with the tables (empty without a change log)."""
        ...

    def get_setting(self, key: str) -> str | None: ...

    def put_setting(self, key: str, value: str) -> None: ...

    def setdefault_setting(self, key: str, value: str) -> str:
        """``key``'s setting, set to ``value`` first if it has none (atomically, for a store that
        several processes share: each gets the first one's)."""
        ...

    @property
    def last_seq(self) -> int:
        """The sequence number of the last change published (during a listener's call: the last
        of the batch it is shown); the same batch has the same number in every process."""
        ...

    @property
    def replaying(self) -> bool:
        """Whether this thread is publishing a batch another process committed (a store shared
        by several processes): its listeners see it as any batch, but must not commit follow-ups
        for it (the sessions a policy change ends): the process that committed it does, and they
        arrive through the log. Writing while replaying raises."""
        ...

    def catch_up(self) -> bool:
        """Apply at once what other processes sharing the store had committed when this was
        called (one bounded round trip, coalesced with others asking at the same time); whether
        anything new was applied. A request pinned to a state reads the new one after it. False
        at once for a store no other process shares."""
        ...

    def lead(self) -> bool:
        """Whether this process runs what one process of those sharing the store runs (the
        control listener, the maintenance ticker); True for a store no other process shares."""
        ...

    def when_leading(self, start: Callable[[], None], stop: Callable[[], None]) -> None:
        """Call ``start`` once this process leads (at once if it does), ``stop`` if it no longer
        does; a process that does not lead at first takes the lead when the one that led stops
        (a shared store: on its own thread, within seconds)."""
        ...

    def attempts_ledger(self) -> Attempts:
        """Where guesses at secrets are counted: this process's memory, or, for a store other
        processes share, a ledger they share (so N processes allow no more guesses than one)."""
        ...

    def activity_board(self, retain: timedelta) -> ActivityBoard:
        """Where API sessions' activity is shared with the other processes of the store (nothing
        to share for a store only this process opens); what is not used for ``retain`` goes."""
        ...

    def fleet_board(self) -> FleetBoard:
        """Where the routers connected to this process are shared with the other processes of
        the store, and theirs learnt (nothing to share for a store only this process opens)."""
        ...

    def posture_board(self) -> PostureBoard:
        """Where identities' posture data is shared with the other processes of the store
        (nothing to share for a store only this process opens)."""
        ...

    def rate_board(self) -> RateBoard:
        """Where what clients spend of their request budgets is shared with the other processes
        of the store, so that a budget holds for all of them (nothing to share for a store only
        this process opens)."""
        ...

    def commit_times(self) -> CommitTimes:
        """When the store's batches were committed, as every process of it tells it (nothing to
        share for a store only this process opens)."""
        ...

    def access_change_log(self) -> AccessChangeLog:
        """Where the access changes of each batch are kept (one log per store: every call
        answers the same)."""
        ...

    def snapshot(self, at: datetime) -> str:
        """A consistent copy of the durable database, next to it, named for ``at``; its path.

        Taken under the write lock (whole batches only; re-entrant, so a writer holding it may
        snapshot) while reads go on. The name is the database file's plus ``-YYYYMMDD-HHMMSS``
        (``at`` in UTC, OpenZiti's snapshot naming); an existing file of that name is kept and its
        path returned. A store without a database file raises :class:`SnapshotUnsupportedError`.
        """
        ...

    def close(self) -> None: ...


class SnapshotUnsupportedError(RuntimeError):
    """The store keeps no database file to copy (the in-memory store)."""


class UnitOfWork:
    """Changes gathered by a manager and committed together; reads see the pending changes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._puts: dict[tuple[str, str], Entity] = {}
        self._deletes: dict[tuple[str, str], type[Entity]] = {}

    def get(self, kind: type[E], id: str) -> E | None:
        key = (kind.ENTITY, id)
        if key in self._deletes:
            return None
        pending = self._puts.get(key)
        if pending is not None:
            assert isinstance(pending, kind)
            return pending
        return self.store.get(kind, id)

    def all(self, kind: type[E]) -> list[E]:
        out: list[E] = []
        seen: set[str] = set()
        for entity in self.store.all(kind):
            key = (kind.ENTITY, entity.id)
            seen.add(entity.id)
            if key in self._deletes:
                continue
            pending = self._puts.get(key, entity)
            assert isinstance(pending, kind)
            out.append(pending)
        for (entity_kind, entity_id), extra in self._puts.items():
            if entity_kind == kind.ENTITY and entity_id not in seen:
                assert isinstance(extra, kind)
                out.append(extra)
        return out

    def find_unique(self, kind: type[E], field: str, value: object) -> E | None:
        """``Store.find_unique`` seen through the pending changes."""
        for (entity_kind, _), pending in self._puts.items():
            if entity_kind == kind.ENTITY and getattr(pending, field) == value:
                assert isinstance(pending, kind)
                return pending
        stored = self.store.find_unique(kind, field, value)
        current = self.get(kind, stored.id) if stored is not None else None
        return current if current is not None and getattr(current, field) == value else None

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        """``Store.find_by`` seen through the pending changes."""
        out = [e for e in (self.get(kind, c.id) for c in self.store.find_by(kind, field, value)) if e]
        out = [e for e in out if getattr(e, field) == value]
        seen = {e.id for e in out}
        for (entity_kind, _), entity in self._puts.items():
            if entity_kind == kind.ENTITY and entity.id not in seen and getattr(entity, field) == value:
                assert isinstance(entity, kind)
                out.append(entity)
        return out

    def put(self, entity: Entity) -> None:
        key = (entity.ENTITY, entity.id)
        self._deletes.pop(key, None)
        self._puts[key] = entity

    def delete(self, kind: type[Entity], id: str) -> None:
        key = (kind.ENTITY, id)
        self._puts.pop(key, None)
        self._deletes[key] = kind

    def changes(self) -> list[Change]:
        out: list[Change] = [Put(e) for e in self._puts.values()]
        out.extend(Delete(kind, key[1]) for key, kind in self._deletes.items())
        return out

    def commit(self) -> None:
        changes = self.changes()
        if changes:
            self.store.commit(changes)
        self._puts.clear()
        self._deletes.clear()


def iter_changes(changes: Sequence[Change]) -> Iterator[tuple[str, Change]]:
    """Each change with the entity kind name it touches."""
    for change in changes:
        kind = change.entity.ENTITY if isinstance(change, Put) else change.kind.ENTITY
        yield kind, change
