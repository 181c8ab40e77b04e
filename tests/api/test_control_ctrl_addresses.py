"""Routers are told the network's controllers (``UPDATE_CTRL_ADDRESSES``, ``controller.control``):
every controller's control address after the hello, and again whenever a controller joins, moves
or is removed. Real listener, real loop, a router enrolled through the API over TLS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from channel import control
from controller.settings import Settings
from engine.managers.controllers import Joining
from tests.api.control_helpers import Plane, enrolled_router, start_plane
from tests.conftest import Api


@pytest.fixture
def settings(home: Path) -> Settings:
    """The control listener on a free port of the loopback."""
    return Settings(home=home, bind="127.0.0.1:1280", ctrl_bind="127.0.0.1:0", db_writer="thread")


@pytest.fixture
def plane(api: Api, tmp_path: Path) -> Iterator[Plane]:
    api.app.join_network()  # as `trellis serve` does before its control listener starts
    running = start_plane(api, tmp_path)
    yield running
    running.close()


def other(id: str, address: str) -> Joining:
    return Joining(id=id, name=id, ctrl_address=address, cert_pem="PEM", fingerprint="ab" * 20)


def test_a_router_is_told_every_controller_after_its_hello_and_as_they_change(api: Api, plane: Plane) -> None:
    own = api.ctrl.managers.controllers.ctrl_addresses()
    assert own == [f"tls:{api.ctrl.settings.advertised_ctrl_address}"]
    link = plane.connect(enrolled_router(api))
    link.hello()
    link.full_state()

    first = link.take(control.UPDATE_CTRL_ADDRESSES)
    assert first["addresses"] == own
    assert first["controllers"] == [{"id": api.ctrl.controller_id, "address": own[0]}]

    api.ctrl.managers.controllers.join(other("ctrl-b", "tls:127.0.0.2:6262"))
    joined = link.take(control.UPDATE_CTRL_ADDRESSES)
    assert sorted(joined["addresses"]) == sorted([*own, "tls:127.0.0.2:6262"])

    api.ctrl.managers.controllers.join(other("ctrl-b", "tls:127.0.0.2:6262"))  # nothing changed
    api.ctrl.managers.controllers.join(other("ctrl-b", "tls:ctrl-b.example.test:6262"))  # moved
    moved = link.take(control.UPDATE_CTRL_ADDRESSES)
    assert sorted(moved["addresses"]) == sorted([*own, "tls:ctrl-b.example.test:6262"])

    api.ctrl.managers.controllers.remove("ctrl-b", own_id=api.ctrl.controller_id)
    assert link.take(control.UPDATE_CTRL_ADDRESSES)["addresses"] == own


def test_a_router_connecting_later_is_told_the_controllers_that_are_away_too(api: Api, plane: Plane) -> None:
    """A controller whose processes all stopped is still a member: routers keep trying it."""
    api.ctrl.managers.controllers.join(other("ctrl-away", "tls:127.0.0.3:6262"))
    link = plane.connect(enrolled_router(api))
    link.hello()
    link.full_state()

    told = link.take(control.UPDATE_CTRL_ADDRESSES)

    assert "tls:127.0.0.3:6262" in told["addresses"]
    assert {"id": "ctrl-away", "address": "tls:127.0.0.3:6262"} in told["controllers"]
