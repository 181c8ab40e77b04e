"""Policy advice for one (identity, service) pair, as OpenZiti's ``AnalyzeServiceReachability`` (§4).

- ``is_dial_allowed`` / ``is_bind_allowed``: some service policy of that type links both. Posture
  checks are ignored.
- ``identity_router_ids``: the distinct edge routers of every edge router policy selecting the
  identity; ``service_router_ids``: those of every service edge router policy selecting the service;
  ``common_router_ids``: both. Online status, ``isVerified`` and ``disabled`` do not filter them.

An :class:`Advice` is cheap to make: it holds the two router bitsets and a snapshot of the router
slot -> id table, and turns slots into ids only when a ``*_ids`` property is read. The counts are
popcounts. Id tuples are sorted. Treat an :class:`Advice` as immutable.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.policy.bitset import select

__all__ = ["Advice"]


class Advice:
    """The answer of :meth:`engine.policy.graph.PolicyGraph.advice`."""

    __slots__ = ("_identity_routers", "_router_ids", "_service_routers", "is_bind_allowed", "is_dial_allowed")

    def __init__(
        self,
        is_dial_allowed: bool,
        is_bind_allowed: bool,
        identity_routers: int,
        service_routers: int,
        router_ids: Sequence[str | None],
    ) -> None:
        self.is_dial_allowed = is_dial_allowed
        self.is_bind_allowed = is_bind_allowed
        self._identity_routers = identity_routers
        self._service_routers = service_routers
        self._router_ids = router_ids

    @property
    def identity_router_count(self) -> int:
        """How many edge routers the identity's edge router policies give it."""
        return self._identity_routers.bit_count()

    @property
    def service_router_count(self) -> int:
        """How many edge routers the service's service edge router policies give it."""
        return self._service_routers.bit_count()

    @property
    def common_router_count(self) -> int:
        """How many edge routers are in both sets."""
        return (self._identity_routers & self._service_routers).bit_count()

    @property
    def has_common_router(self) -> bool:
        """The shared-router check of session creation (online status not considered)."""
        return bool(self._identity_routers & self._service_routers)

    def _ids(self, bits: int) -> tuple[str, ...]:
        return tuple(sorted([i for i in select(bits, self._router_ids) if i is not None]))

    @property
    def identity_router_ids(self) -> tuple[str, ...]:
        """The identity's edge routers, sorted by id."""
        return self._ids(self._identity_routers)

    @property
    def service_router_ids(self) -> tuple[str, ...]:
        """The service's edge routers, sorted by id."""
        return self._ids(self._service_routers)

    @property
    def common_router_ids(self) -> tuple[str, ...]:
        """The edge routers both have, sorted by id."""
        return self._ids(self._identity_routers & self._service_routers)

    def _key(self) -> tuple[bool, bool, tuple[str, ...], tuple[str, ...]]:
        return (self.is_dial_allowed, self.is_bind_allowed, self.identity_router_ids, self.service_router_ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Advice):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Advice(is_dial_allowed={self.is_dial_allowed}, is_bind_allowed={self.is_bind_allowed}, "
            f"identity_router_ids={self.identity_router_ids}, service_router_ids={self.service_router_ids}, "
            f"common_router_ids={self.common_router_ids})"
        )
