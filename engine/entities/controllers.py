"""The controllers of the network: a durable record per controller (OpenZiti's cluster members).

A controller writes its record when it starts (``ControllerManager.join``): where its APIs and
its control listener are, its server certificate, when it last started. The record outlives the
controller's processes, so ``/controllers`` lists a controller that is away (``isOnline`` false,
from the fleet's live presence) and routers are told its control address, until an operator
removes it (``trellis controller remove``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from engine.entities import Entity, register


@register
@dataclass(kw_only=True)
class ControllerMember(Entity):
    """One controller of the network (its id is the one its home keeps in ``controller.id``)."""

    ENTITY = "controllers"

    name: str
    #: Where routers reach its control listener, ``tls:host:port`` ("" when not known).
    ctrl_address: str = ""
    #: API name -> its addresses (``{"url", "version"}``), as ``apiAddresses`` shows them.
    api_addresses: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    #: Its server certificate (PEM) and that certificate's SHA-1 fingerprint.
    cert_pem: str = ""
    fingerprint: str = ""
    #: When a process of it last started (joined the network).
    last_joined_at: datetime
