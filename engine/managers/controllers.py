"""The controllers of the network as durable members (:class:`ControllerManager`).

Every controller writes its record when a process of it starts (:meth:`ControllerManager.join`):
its name, where its APIs and control listener are, its server certificate and fingerprint, when
it last started. The record stays when the controller stops: ``/controllers`` lists it with
``isOnline`` from the fleet (a controller is online while a live process of it shares its member
through :class:`~engine.managers.fleet.Fleet`), routers are told its control address (they keep
trying it), and enrollment JWTs name it. An operator removes a controller that is gone for good
(:meth:`ControllerManager.remove`, ``trellis controller remove``); a controller removed by mistake
writes its record again at its next start.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engine.entities.controllers import ControllerMember
from engine.errors import EntityCanNotBeDeletedError
from engine.managers._base import EntityManager, Env
from engine.managers.fleet import Fleet

#: A process of a controller starting within this of the controller's last join is taken as a
#: sibling worker of the same start: its join writes nothing unless something else changed.
SAME_START = timedelta(seconds=60)


@dataclass(frozen=True)
class Joining:
    """What a controller says of itself when a process of it starts."""

    id: str
    name: str
    ctrl_address: str
    api_addresses: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    cert_pem: str = ""
    fingerprint: str = ""
    #: When this process started.
    joined_at: datetime | None = None
    #: When a new record says it was created (the first controller: the network's creation);
    #: None: now.
    created_at: datetime | None = None


class ControllerManager(EntityManager[ControllerMember]):
    kind = ControllerMember

    def __init__(self, env: Env, fleet: Fleet) -> None:
        super().__init__(env)
        self.fleet = fleet

    def join(self, joining: Joining) -> ControllerMember:
        """Write this controller's record (created, or updated with what changed and when it
        joined); nothing is written for a sibling process of the same start that changes nothing."""
        now = self.env.clock.now()
        joined_at = joining.joined_at or now
        values = {
            "name": joining.name,
            "ctrl_address": joining.ctrl_address,
            "api_addresses": {k: [dict(a) for a in v] for k, v in joining.api_addresses.items()},
            "cert_pem": joining.cert_pem,
            "fingerprint": joining.fingerprint,
        }
        with self.env.store.write_lock():
            old = self.env.store.get(ControllerMember, joining.id)
            if old is None:
                created = joining.created_at or now
                return self.save(
                    ControllerMember(
                        id=joining.id,
                        created_at=created,
                        updated_at=now,
                        last_joined_at=joined_at,
                        **values,  # type: ignore[arg-type]
                    )
                )
            same = all(getattr(old, k) == v for k, v in values.items())
            if same and abs(joined_at - old.last_joined_at) < SAME_START:
                return old
            return self.save(
                dataclasses.replace(old, updated_at=now, last_joined_at=joined_at, **values)  # type: ignore[arg-type]
            )

    def online_ids(self) -> set[str]:
        """The controllers a live process serves now (this one's included once it said so)."""
        return {str(m["id"]) for m in self.fleet.members() if m.get("id")}

    def remove(self, id: str, *, own_id: str) -> ControllerMember:
        """Forget a controller gone for good: its record goes, and with it its place in
        ``/controllers``, in enrollment JWTs and in what routers are told. Refused for ``own_id``
        (the controller asking) and for a controller a live process serves (stop it first)."""
        with self.env.store.write_lock():
            old = self.require(id)
            if id == own_id:
                raise EntityCanNotBeDeletedError(
                    f"controller {id} is this home's own controller: remove it from another one"
                )
            if id in self.online_ids():
                raise EntityCanNotBeDeletedError(f"controller {id} is online: stop it first")
            self.delete(id)
            return old

    def endpoints(self) -> list[tuple[str, str]]:
        """Every controller of the network with a control address, as ``(id, tls:host:port)``,
        each address once: the records' (sorted by id), then those of live controllers without
        one (a process of an older Trellis, or one whose record is still being written). What
        routers are told (``UPDATE_CTRL_ADDRESSES``)."""
        found: dict[str, str] = {}
        for member in sorted(self.list(), key=lambda m: m.id):
            if member.ctrl_address:
                found.setdefault(member.ctrl_address, member.id)
        for shared in self.fleet.members():
            address = str(shared.get("ctrlAddress") or "")
            if address and isinstance(shared.get("id"), str):
                found.setdefault(address, shared["id"])
        return [(id, address) for address, id in found.items()]

    def ctrl_addresses(self) -> list[str]:
        """The control address of every controller of the network (:meth:`endpoints`)."""
        return [address for _, address in self.endpoints()]
