"""Routers follow the network's controllers (``UPDATE_CTRL_ADDRESSES``, router.controllers): a
controller names every controller's control address, and the router connects to those that
joined after it enrolled, stops connecting to those removed, and keeps the list in ``router.json``
for its next start; over real mutual TLS against the stand-in controllers of test_control."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from channel import control
from channel.control import UPDATE_CTRL_ADDRESSES
from channel.frames import Message
from router import identity
from router.control import ControlClient
from router.controllers import Controllers
from router.main import serve
from router.ports import ApiSessions
from tests.router.helpers import Ca, Pki, run_async, until, within
from tests.router.test_control import Controller, Edge
from tests.router.test_controllers import ServerPki, client_for
from tests.router.test_links import router_dir


def update(*addresses: str) -> Message:
    """What a Trellis controller sends: every controller's ``tls:host:port``."""
    return control.message(
        UPDATE_CTRL_ADDRESSES,
        {
            "addresses": [f"tls:{a}" for a in addresses],
            "controllers": [{"id": f"c-{i}", "address": f"tls:{a}"} for i, a in enumerate(addresses)],
        },
    )


class Following:
    """:class:`Controllers` starting with ``first``'s address only, able to add clients of
    ``pki``, running until the block ends; ``kept`` records what it would keep on disk."""

    def __init__(self, pki: Pki, first: Controller, *, follow: bool = True) -> None:
        self.sessions = ApiSessions()
        self.kept: list[list[str]] = []

        def make(address: str) -> ControlClient:
            return client_for(pki, address, self.sessions, Edge())

        self.plane = Controllers([make(first.address)], make_client=make, follow=follow)
        self.plane.on_addresses = self.kept.append
        self._task: asyncio.Future[None] | None = None

    async def __aenter__(self) -> Controllers:
        self._task = asyncio.ensure_future(self.plane.run())
        return self.plane

    async def __aexit__(self, *exc: object) -> None:
        self.plane.stop()
        assert self._task is not None
        await within(self._task)


@run_async
async def test_a_controller_that_joined_later_is_connected_to_and_one_removed_is_dropped(pki: Pki) -> None:
    async with Controller(pki) as one, Controller(pki) as two:
        following = Following(pki, one)
        async with following as plane:
            await until(lambda: len(plane.up()) == 1, "the enrolled controller connected")

            one.channel.send(update(one.address, two.address))
            await until(lambda: len(plane.up()) == 2, "the controller that joined later connected")
            assert len(two.hellos) == 1
            assert plane.addresses == [one.address, two.address]

            two.channel.send(update(one.address))  # two was removed: any controller may say so
            await until(lambda: plane.addresses == [one.address], "the removed controller dropped")
            await until(lambda: len(plane.up()) == 1, "its connection closed")
            await asyncio.sleep(0.2)  # a dropped controller is not dialed again
            assert len(two.hellos) == 1
            assert plane.up()[0].address == one.address
        assert following.kept == [[one.address, two.address], [one.address]]


@run_async
async def test_the_same_list_again_an_empty_one_or_bad_addresses_change_nothing(pki: Pki) -> None:
    async with Controller(pki) as one:
        following = Following(pki, one)
        async with following as plane:
            await until(lambda: len(plane.up()) == 1, "connected")

            one.channel.send(update(one.address))
            one.channel.send(control.message(UPDATE_CTRL_ADDRESSES, {"addresses": [], "controllers": []}))
            one.channel.send(control.message(UPDATE_CTRL_ADDRESSES, {"addresses": ["tls:nonsense"]}))
            await one.settle()

            assert plane.addresses == [one.address]
            assert len(plane.up()) == 1
        assert following.kept == []


@run_async
async def test_a_router_whose_controllers_the_operator_chose_keeps_them(pki: Pki) -> None:
    async with Controller(pki) as one, Controller(pki) as two:
        following = Following(pki, one, follow=False)
        async with following as plane:
            await until(lambda: len(plane.up()) == 1, "connected")

            one.channel.send(update(two.address))
            await one.settle()
            await asyncio.sleep(0.1)

            assert plane.addresses == [one.address]
            assert two.hellos == []
        assert following.kept == []


@run_async
async def test_a_controller_added_later_gets_the_links_and_the_router_fails_over_to_it(pki: Pki) -> None:
    async with Controller(pki) as one, Controller(pki) as two, Following(pki, one) as plane:
        await until(lambda: len(plane.up()) == 1, "connected")
        plane.links_changed([{"id": "l-1", "routerId": "r-2", "dialed": True, "protocol": "tls"}])

        one.channel.send(update(one.address, two.address))
        links = json.loads((await two.next(control.LINKS)).body)
        assert [link["id"] for link in links["links"]] == ["l-1"]

        await one.__aexit__(None, None, None)
        await until(lambda: [c.address for c in plane.up()] == [two.address], "only two is up")
        assert plane.connected.is_set()


# -- the router process ------------------------------------------------------------------------------
def enrolled(directory: Path, ctrls: list[str]) -> identity.RouterRecord:
    """``directory`` (:func:`router_dir`) with a ``router.json`` naming ``ctrls``."""
    (directory / identity.KEY).chmod(0o600)
    record = identity.RouterRecord(
        id="router-1",
        name="router-one",
        controller="https://127.0.0.1:1",
        ctrl=ctrls[0],
        edge="127.0.0.1:0",
        advertise="127.0.0.1",
    ).with_ctrls(ctrls)
    (directory / identity.CONFIG).write_text(json.dumps(dataclasses.asdict(record)))
    return record


@run_async
async def test_the_router_keeps_the_controllers_list_for_its_next_start(tmp_path: Path) -> None:
    """``serve`` enrolled with one controller is told of a second: it connects to it and writes
    both in ``router.json``; started again from its directory, it connects to both at once."""
    ca = Ca("Following CA")
    directory = router_dir(tmp_path, ca, "router-1")
    (tmp_path / "ca.pem").write_bytes((directory / identity.CA).read_bytes())
    server_pki: Any = ServerPki(ca, tmp_path)
    async with Controller(server_pki) as one, Controller(server_pki) as two:
        record = enrolled(directory, [one.address])
        one.after_hello = [update(one.address, two.address)]
        stop = asyncio.Event()
        running = asyncio.ensure_future(serve(directory, record, stop))
        try:
            await until(lambda: two.hellos != [], "a hello to the controller that joined later")
            kept = identity.load(directory)
            assert kept.ctrls == (one.address, two.address)
            assert (kept.id, kept.edge, kept.advertise) == (record.id, record.edge, record.advertise)
        finally:
            stop.set()
            await within(running)

        one.after_hello = []
        seen = len(one.hellos), len(two.hellos)
        stop = asyncio.Event()
        running = asyncio.ensure_future(serve(directory, identity.load(directory), stop))
        try:
            await until(
                lambda: len(one.hellos) > seen[0] and len(two.hellos) > seen[1], "a hello to each again"
            )
        finally:
            stop.set()
            await within(running)
