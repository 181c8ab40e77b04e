"""Request limits: per-client budgets (429 with ``Retry-After``) and a per-request time budget (503).

Budgets are token buckets, one per client and kind, owned by the controller's app (no global
state: two apps in one process share nothing):

- **authentication** (``/authenticate``, ``/authenticate/mfa``, the enrollment endpoints and MFA
  verification, every method but GET/HEAD; and every other operation that checks an MFA code or
  a current password: :func:`is_authentication`) per client address, checked before any
  credential is looked at, so guessing costs the server nothing once the budget is spent;
- **writes** (POST/PUT/PATCH/DELETE anywhere else) per API session, else per client address.

Several processes serving one database (PostgreSQL) share the budgets through the store's
:class:`~engine.ports.RateBoard`: each admits from its own buckets, with no round trip, shares
what it admitted every round (a quarter of a second) and takes off what the others did, so a
client's budget holds across the processes, not once per process (:class:`RateLimiter`).

A refused request is answered 429 ``SERVER_TOO_MANY_REQUESTS`` (OpenZiti's code for its command
rate limiter) with ``Retry-After``: the whole seconds until one more request fits. A refused
request does nothing: it neither counts towards an auth policy's lockout nor clears it.

The time budget cannot stop a thread, so it is cooperative: the middleware puts a
:class:`Deadline` on ``req.context`` and the loops that can grow with the data (ZitiQL filtering
over a collection, rendering a page) check it through :func:`within_deadline`, raising
:class:`~engine.errors.RequestTimeoutError` (503 ``TIMEOUT``). Writes never check it: a write
that has started finishes.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any, TypeVar

import falcon

from api.controller import CLIENT_BASE, MANAGEMENT_BASE
from controller.settings import Settings
from engine.errors import RequestTimeoutError, TooManyRequestsError
from engine.ports import NoRateBoard, RateBoard, RateSpending

T = TypeVar("T")

#: Buckets kept per limiter; past this the least recently used client's bucket is dropped.
MAX_CLIENTS = 65536
#: A deadline is checked every this many items of a loop (and on the first).
CHECK_EVERY = 64

_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_BASES = (CLIENT_BASE, MANAGEMENT_BASE)
#: The OIDC provider's paths that check a password, a certificate, an external JWT, a TOTP code
#: or a code / refresh token (``api.oidc``): the authentication budget, as ``/authenticate``.
OIDC_LOGIN_PATHS = ("/oidc/login/", "/oidc/oauth/token")


#: Operations that check a guessable secret besides the authentication paths, by method: the MFA
#: code operations (remove MFA, view or regenerate recovery codes, a TOTP token) and the current
#: password of an identity changing its own (``/current-identity/authenticators/{id}``).
_SECRET_CHECKS: dict[str, tuple[str, ...]] = {
    "GET": ("/current-identity/mfa/recovery-codes",),
    "POST": ("/current-identity/mfa/recovery-codes", "/current-api-session/totp-token"),
    "DELETE": ("/current-identity/mfa",),
    "PUT": ("/current-identity/authenticators/",),
    "PATCH": ("/current-identity/authenticators/",),
}


def is_authentication(path: str, method: str = "POST") -> bool:
    """Whether ``method path`` (under an API base) authenticates, enrolls or checks a guessable
    secret (an MFA code, a current password): the per-address authentication budget."""
    if path.startswith(OIDC_LOGIN_PATHS):  # the OIDC provider's login steps and token endpoint
        return method not in ("GET", "HEAD")
    for base in _BASES:
        if path.startswith(base):
            rest = path[len(base) :].rstrip("/")
            break
    else:
        return False
    if rest in ("/authenticate", "/enroll", "/current-identity/mfa/verify") or rest.startswith(
        ("/authenticate/", "/enroll/")
    ):
        return method not in ("GET", "HEAD")
    for checked in _SECRET_CHECKS.get(method, ()):
        if rest == checked or (
            checked.endswith("/") and rest.startswith(checked) and "/" not in rest[len(checked) :]
        ):
            return True
    return False


@dataclass
class _Bucket:
    tokens: float
    at: float
    #: What this process may still admit of the bucket until the next round (shared budgets).
    allowance: float = math.inf
    #: The round the allowance was given in.
    round: int = -1


class RateLimiter:
    """Token buckets per client key: ``burst`` requests at once, refilled at ``per_minute``.

    ``seconds`` is the clock the buckets refill by (monotonic seconds; a clock that goes backwards
    refills nothing). ``per_minute`` 0 turns the limiter off.

    **Shared by several processes** (:meth:`share`, a :class:`~engine.ports.RateBoard` calling
    :meth:`absorb` every round): each bucket is this process's view of the client's budget over
    all of them. What other processes admitted is taken off when they say so (a bucket may go
    below zero: a debt refilled before anything more is admitted), and so that processes hit at
    once do not each admit the whole budget before they hear of each other, a process admits
    in one round at most its share of what it knows is left: ``tokens / processes`` (at least
    one request while one is left).
    """

    def __init__(
        self,
        per_minute: int,
        burst: int,
        seconds: Callable[[], float],
        *,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(max(1, burst))
        self.seconds = seconds
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()
        #: Whether what is admitted is counted for other processes (:meth:`share`).
        self.shared = False
        #: How many processes share the budgets (as the board last said) and the board's round.
        self.processes = 1
        self._round = 0
        self._spent: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    # -- shared by several processes ---------------------------------------------------------
    def share(self) -> None:
        """From now on count what is admitted for :meth:`spent` (a board shares it)."""
        self.shared = True

    def spent(self) -> dict[str, int]:
        """What was admitted per key since the last call (for the other processes)."""
        with self._lock:
            spent, self._spent = self._spent, {}
        return spent

    def absorb(self, spent: dict[str, int], processes: int) -> None:
        """A round: other processes admitted ``spent`` per key since the last round, and
        ``processes`` share the budgets now. Every bucket's allowance is given anew when it is
        next used."""
        if not self.enabled:
            return
        now = self.seconds()
        with self._lock:
            self.processes = max(1, processes)
            self._round += 1
            for key, n in spent.items():
                bucket = self._buckets.get(key)
                if bucket is None:
                    bucket = self._buckets[key] = _Bucket(self.capacity, now)
                    while len(self._buckets) > self.max_clients:
                        self._buckets.popitem(last=False)
                else:
                    self._refill(bucket, now)
                # a debt, at most a whole budget: it is refilled before anything more is admitted
                bucket.tokens = max(-self.capacity, bucket.tokens - n)

    def take(self, key: str) -> int | None:
        """Spend one request of ``key``'s budget: None if allowed, else the seconds to wait."""
        if not self.enabled:
            return None
        now = self.seconds()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(self.capacity, now)
                while len(self._buckets) > self.max_clients:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(key)
                self._refill(bucket, now)
            if bucket.tokens < 1.0:
                return max(1, math.ceil((1.0 - bucket.tokens) / self.rate))
            if self.processes > 1:
                if bucket.round != self._round:
                    bucket.round = self._round
                    bucket.allowance = max(1.0, bucket.tokens / self.processes)
                if bucket.allowance < 1.0:
                    return 1  # this process's share is spent: the next round (in a moment) gives more
                bucket.allowance -= 1.0
            bucket.tokens -= 1.0
            if self.shared:
                self._spent[key] = self._spent.get(key, 0) + 1
            return None

    def prune(self) -> int:
        """Forget clients whose budget is whole again (they would start full anyway)."""
        now = self.seconds()
        with self._lock:
            full = []
            for key, bucket in self._buckets.items():
                self._refill(bucket, now)
                if bucket.tokens >= self.capacity:
                    full.append(key)
            for key in full:
                del self._buckets[key]
            return len(full)

    def __len__(self) -> int:
        return len(self._buckets)

    def _refill(self, bucket: _Bucket, now: float) -> None:
        elapsed = now - bucket.at
        if elapsed > 0:
            bucket.tokens = min(self.capacity, bucket.tokens + elapsed * self.rate)
            bucket.at = now


class Deadline:
    """The monotonic time by which a request must be done; :meth:`check` raises past it."""

    __slots__ = ("at", "monotonic")

    def __init__(self, seconds: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self.at = monotonic() + seconds

    @property
    def expired(self) -> bool:
        return self.monotonic() >= self.at

    def check(self) -> None:
        if self.expired:
            raise RequestTimeoutError()


def within_deadline(req: falcon.Request, items: Iterable[T]) -> Iterable[T]:
    """``items``, checking the request's deadline on the first and every ``CHECK_EVERY``-th one.

    The items are handed on in chunks of ``CHECK_EVERY`` (slices of a sequence, else taken from
    the iterator), so that an item costs nothing in Python: only a chunk does."""
    deadline: Deadline | None = getattr(req.context, "deadline", None)
    if deadline is None:
        return items
    if isinstance(items, Sequence):
        return chain.from_iterable(_slices(items, deadline))
    return chain.from_iterable(_chunks(iter(items), deadline))


def _slices(items: Sequence[T], deadline: Deadline) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), CHECK_EVERY):
        deadline.check()
        yield items[start : start + CHECK_EVERY]


def _chunks(items: Iterator[T], deadline: Deadline) -> Iterator[list[T]]:
    while chunk := list(islice(items, CHECK_EVERY)):
        deadline.check()
        yield chunk


#: The kinds of budget as a :class:`~engine.ports.RateBoard` names them.
AUTH, WRITE = "auth", "write"


class RequestLimits:
    """One controller's request budgets and time budget (built once by ``create_app``).

    With a ``board`` that shares (a store other processes open), the budgets are the cluster's:
    each process shares what it admits and takes off what the others admitted (see
    :class:`RateLimiter`)."""

    def __init__(
        self,
        settings: Settings,
        seconds: Callable[[], float] = time.monotonic,
        *,
        board: RateBoard | None = None,
    ) -> None:
        self.auth = RateLimiter(settings.rate_auth_per_minute, settings.rate_auth_burst, seconds)
        self.writes = RateLimiter(settings.rate_write_per_minute, settings.rate_write_burst, seconds)
        self.timeout = settings.request_timeout
        if board is not None and not isinstance(board, NoRateBoard):
            self.auth.share()
            self.writes.share()
            board.attach(self.spent, self.absorb)

    def spent(self) -> RateSpending:
        """What both budgets admitted since the last round, for the board."""
        out: RateSpending = {(AUTH, key): n for key, n in self.auth.spent().items()}
        out.update({(WRITE, key): n for key, n in self.writes.spent().items()})
        return out

    def absorb(self, spent: RateSpending, processes: int) -> None:
        """A round of the board: what the other processes admitted, how many share the budgets."""
        auth: dict[str, int] = {}
        writes: dict[str, int] = {}
        for (kind, key), n in spent.items():
            if kind == AUTH:
                auth[key] = n
            elif kind == WRITE:
                writes[key] = n
        self.auth.absorb(auth, processes)
        self.writes.absorb(writes, processes)

    def deadline(self) -> Deadline | None:
        """A new request's deadline (None when requests have no time budget)."""
        return Deadline(self.timeout) if self.timeout > 0 else None

    def admit(self, req: falcon.Request) -> None:
        """Spend the request's budget, or raise 429 with ``Retry-After``."""
        method = req.method
        if method not in _WRITES and not (method == "GET" and req.path.endswith("/recovery-codes")):
            return  # reads spend nothing (the one read that checks a code is counted)
        address = str(req.remote_addr or "")
        if is_authentication(req.path, method):
            wait = self.auth.take(address)
        else:
            session: Any = getattr(req.context, "session", None)
            wait = self.writes.take(f"session:{session.id}" if session is not None else f"ip:{address}")
        if wait is not None:
            raise TooManyRequestsError(headers={"Retry-After": str(wait)})

    def prune(self) -> None:
        """Forget idle clients (the maintenance ticker calls this)."""
        self.auth.prune()
        self.writes.prune()
