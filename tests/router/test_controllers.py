"""A router with several controllers (router.controllers): one control connection to each, over
real mutual TLS against the stand-in controllers of test_control; requests asked of a connected
one and of the next when it is unavailable; pushes from any one acting; the addresses kept at
enrollment, in router.json and from TRELLIS_ROUTER_CTRL."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import pytest

from channel import control
from channel.control import (
    API_SESSION_CHANNELS,
    API_SESSION_REMOVED,
    CIRCUITS_ENDED,
    CREATE_CIRCUIT,
    CREATE_CIRCUIT_REPLY,
    LINKS,
    ROUTER_LINKS,
)
from channel.frames import RESULT, Message, result
from controller.settings import SettingError, Settings
from router import identity
from router.control import ControlClient, RouterLink, client_context
from router.controllers import Controllers
from router.edge import EdgeListener
from router.enroll import controller_addresses, split_addresses
from router.main import serve
from router.ports import ApiSessions, Circuit, Refused, Unavailable
from tests.router.helpers import Ca, Pki, Sdk, run_async, until, within, write_pair
from tests.router.test_control import CIRCUIT_REPLY, Controller, Edge, full_state, wire_session
from tests.router.test_links import router_dir


def client_for(
    pki: Pki, address: str, sessions: ApiSessions, edge: Any = None, **options: Any
) -> ControlClient:
    options.setdefault("backoff_first", 0.01)
    options.setdefault("backoff_max", 0.05)
    return ControlClient(
        address=address,
        ssl_context=client_context(
            pki.router_client.cert_file, pki.router_client.key_file, pki.network_ca_file
        ),
        hostname="router.example",
        protocols={"tls": "tls://127.0.0.1:3022"},
        version="v0.1.0",
        api_sessions=sessions,
        edge=edge,
        **options,
    )


class Plane:
    """:class:`Controllers` over ``clients`` (by default a client per stand-in controller),
    running until the block ends."""

    def __init__(
        self,
        pki: Pki,
        controllers: list[Controller],
        edge: Any = None,
        sessions: ApiSessions | None = None,
        *,
        clients: list[ControlClient] | None = None,
        **options: Any,
    ) -> None:
        self.sessions = sessions if sessions is not None else ApiSessions()
        if clients is None:
            clients = [client_for(pki, c.address, self.sessions, edge, **options) for c in controllers]
        self.plane = Controllers(clients)
        self._task: asyncio.Future[None] | None = None

    async def __aenter__(self) -> Controllers:
        self._task = asyncio.ensure_future(self.plane.run())
        return self.plane

    async def __aexit__(self, *exc: object) -> None:
        self.plane.stop()
        assert self._task is not None
        await within(self._task)


def ask_circuit(plane: Controllers) -> asyncio.Future[Circuit]:
    return asyncio.ensure_future(
        plane.create_circuit(
            session_token="tok",
            api_session_id="as-1",
            fingerprints=["ab"],
            terminator_instance_id="",
            has_public_key=True,
        )
    )


async def grant(controller: Controller) -> Message:
    """``controller`` answers the next CreateCircuit it is asked with :data:`CIRCUIT_REPLY`."""
    request = await controller.next(CREATE_CIRCUIT)
    controller.channel.send(control.message(CREATE_CIRCUIT_REPLY, CIRCUIT_REPLY).reply_to(request))
    return request


def asked(controller: Controller, content_type: int) -> bool:
    """Whether the router sent ``controller`` a message of ``content_type`` (not waiting)."""
    while not controller.received.empty():
        controller._skipped.append(controller.received.get_nowait())
    return any(m.content_type == content_type for m in controller._skipped)


def refuse(hello: Message) -> Message:
    return result(hello, False, "not now")


# -- connecting --------------------------------------------------------------------------------------
@run_async
async def test_a_router_with_two_controllers_connects_to_both_and_reports_to_both(pki: Pki) -> None:
    async with Controller(pki) as one, Controller(pki) as two, Plane(pki, [one, two], Edge()) as plane:
        await until(lambda: len(plane.up()) == 2, "both control connections up")
        assert plane.connected.is_set()
        assert len(one.hellos) == len(two.hellos) == 1
        assert (
            json.loads((await one.next(LINKS)).body)
            == json.loads((await two.next(LINKS)).body)
            == {"links": []}
        )

        plane.api_session_channels(["as-1"], [])
        plane.circuits_ended(["c-9"])
        plane.links_changed([{"id": "l-1", "routerId": "r-2", "dialed": True, "protocol": "tls"}])

        for controller in (one, two):
            notice = await controller.next(API_SESSION_CHANNELS)
            assert json.loads(notice.body) == {"opened": ["as-1"], "closed": []}
            assert json.loads((await controller.next(CIRCUITS_ENDED)).body) == {"circuitIds": ["c-9"]}
            assert json.loads((await controller.next(LINKS)).body)["links"][0]["id"] == "l-1"


@run_async
async def test_the_router_is_connected_while_any_controller_is(pki: Pki) -> None:
    async with Controller(pki) as one:
        two = Controller(pki)
        await two.__aenter__()
        try:
            async with Plane(pki, [one, two], Edge()) as plane:
                await until(lambda: len(plane.up()) == 2, "both control connections up")

                await two.__aexit__(None, None, None)
                await until(lambda: len(plane.up()) == 1, "one control connection down")
                assert plane.connected.is_set()

                one.hello_answer = refuse  # its hellos from now on
                for channel in one.channels:
                    channel.close()
                await until(lambda: not plane.connected.is_set(), "no control connection")
                with pytest.raises(Unavailable):
                    await within(ask_circuit(plane))

                one.hello_answer = lambda hello: Controller.welcome(hello)
                await until(lambda: plane.connected.is_set(), "the first controller dialled again")
                assert plane.up() == [plane.clients[0]]
        finally:
            if two._server is not None and two._server.is_serving():
                await two.__aexit__(None, None, None)


# -- requests ----------------------------------------------------------------------------------------
@run_async
async def test_a_dial_succeeds_while_one_controller_is_stopped(pki: Pki) -> None:
    async with Controller(pki) as two:
        one = Controller(pki)
        await one.__aenter__()
        stopped = False
        try:
            async with Plane(pki, [one, two], Edge()) as plane:
                await until(lambda: len(plane.up()) == 2, "both control connections up")
                first = ask_circuit(plane)
                await grant(one)  # the first connected one is asked first
                assert (await within(first)).circuit_id == "c-1"

                await one.__aexit__(None, None, None)
                stopped = True
                await until(lambda: plane.up() == [plane.clients[1]], "the first controller gone")

                second = ask_circuit(plane)
                await grant(two)
                assert (await within(second)).circuit_id == "c-1"
        finally:
            if not stopped:
                await one.__aexit__(None, None, None)


@run_async
async def test_a_dial_succeeds_with_a_controller_that_never_answered_the_phone(pki: Pki) -> None:
    nobody = Controller(pki)
    await nobody.__aenter__()
    dead = nobody.address
    await nobody.__aexit__(None, None, None)  # nothing listens there any more
    async with Controller(pki) as two:
        sessions = ApiSessions()
        clients = [client_for(pki, dead, sessions), client_for(pki, two.address, sessions)]
        async with Plane(pki, [], sessions=sessions, clients=clients) as plane:
            await within(plane.connected.wait())
            dial = ask_circuit(plane)
            await grant(two)
            assert (await within(dial)).service_name == "echo"


@run_async
async def test_a_request_whose_controller_drops_mid_way_is_answered_by_the_other(pki: Pki) -> None:
    async with (
        Controller(pki) as one,
        Controller(pki) as two,
        Plane(pki, [one, two], Edge()) as plane,
    ):
        await until(lambda: len(plane.up()) == 2, "both control connections up")
        dial = ask_circuit(plane)
        request = await one.next(CREATE_CIRCUIT)

        one.channel.close()  # asked, never answered

        again = await grant(two)
        assert json.loads(again.body) == json.loads(request.body)
        assert (await within(dial)).terminator_id == "t-1"
        assert plane._answered is plane.clients[1]  # asked first from now on


@run_async
async def test_a_bind_asked_again_of_the_other_controller_carries_the_same_terminator_id(pki: Pki) -> None:
    """The router's chosen terminator id goes to every controller it asks: one that committed the
    terminator before its answer was lost makes the next hand back the same terminator."""
    async with (
        Controller(pki) as one,
        Controller(pki) as two,
        Plane(pki, [one, two], Edge()) as plane,
    ):
        await until(lambda: len(plane.up()) == 2, "both control connections up")
        binding = asyncio.ensure_future(
            plane.create_terminator(
                session_token="tok",
                api_session_id="as-1",
                fingerprints=[],
                instance_id="",
                cost=0,
                precedence="default",
                has_public_key=False,
                address="hosted:tok",
                terminator_id="t-chosen",
            )
        )
        first = await one.next(control.CREATE_TERMINATOR)

        one.channel.close()  # asked, never answered

        again = await two.next(control.CREATE_TERMINATOR)
        reply = {"terminatorId": "t-chosen", "sessionId": "s-1", "serviceId": "svc-1"}
        two.channel.send(control.message(control.CREATE_TERMINATOR_REPLY, reply).reply_to(again))
        assert json.loads(first.body)["terminatorId"] == json.loads(again.body)["terminatorId"] == "t-chosen"
        assert (await within(binding)).terminator_id == "t-chosen"


@run_async
async def test_a_request_not_answered_in_time_is_asked_of_the_other(pki: Pki) -> None:
    async with Controller(pki) as one, Controller(pki) as two:
        sessions = ApiSessions()
        clients = [
            client_for(pki, one.address, sessions, request_seconds=0.5),
            client_for(pki, two.address, sessions),
        ]
        async with Plane(pki, [], sessions=sessions, clients=clients) as plane:
            await until(lambda: len(plane.up()) == 2, "both control connections up")
            dial = ask_circuit(plane)
            await one.next(CREATE_CIRCUIT)  # and no answer
            await grant(two)
            assert (await within(dial)).circuit_id == "c-1"


@run_async
async def test_a_refusal_is_final(pki: Pki) -> None:
    async with (
        Controller(pki) as one,
        Controller(pki) as two,
        Plane(pki, [one, two], Edge()) as plane,
    ):
        await until(lambda: len(plane.up()) == 2, "both control connections up")
        dial = ask_circuit(plane)
        request = await one.next(CREATE_CIRCUIT)
        one.channel.send(control.error(request, 3, "no such session"))
        with pytest.raises(Refused) as caught:
            await within(dial)
        assert caught.value.code == 3
        await two.settle()  # what the router sent it before now has arrived
        assert not asked(two, CREATE_CIRCUIT)


@run_async
async def test_with_no_controller_up_a_request_is_unavailable(pki: Pki) -> None:
    async with Controller(pki) as one, Controller(pki) as two:
        sessions = ApiSessions()
        plane = Controllers([client_for(pki, one.address, sessions), client_for(pki, two.address, sessions)])
        with pytest.raises(Unavailable, match="no control connection"):
            await plane.remove_terminators(["t-1"])


# -- pushes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("revoker", [0, 1])
def test_a_revocation_pushed_by_either_controller_closes_the_sdk_channel(pki: Pki, revoker: int) -> None:
    async def scenario() -> None:
        async with Controller(pki) as one, Controller(pki) as two:
            for controller in (one, two):
                controller.after_hello = full_state([wire_session(pki, "binder")])
            async with Plane(pki, [one, two]) as plane:
                sessions = plane.clients[0].api_sessions
                listener = EdgeListener(
                    ssl_context=pki.edge_server_context(),
                    controller=plane,
                    api_sessions=sessions,
                    router_id="r-1",
                    version="v0.1.0",
                )
                plane.edge = listener
                await listener.start("127.0.0.1", 0)
                binder = await Sdk.connect(listener.port, pki.sdk_context("binder"), "binder")
                try:
                    await until(lambda: len(plane.up()) == 2, "both control connections up")
                    assert (await binder.hello("tok-binder")).content_type == RESULT
                    for controller in (one, two):  # each is told
                        notice = await controller.next(API_SESSION_CHANNELS)
                        assert json.loads(notice.body) == {"opened": ["as-binder"], "closed": []}

                    (one, two)[revoker].channel.send(
                        control.message(API_SESSION_REMOVED, {"ids": ["as-binder"]})
                    )

                    await binder.closed()
                    assert sessions.by_token("tok-binder") is None
                    assert listener.api_session_ids() == []
                finally:
                    binder.channel.close()
                    await listener.stop()

    run_async(scenario)()


@run_async
async def test_each_full_state_is_gathered_on_its_own_and_either_replaces_the_sessions(pki: Pki) -> None:
    edge = Edge()
    async with Controller(pki) as one, Controller(pki) as two:
        # one's state in two chunks, two's in one: they interleave on the router
        one.after_hello = full_state([wire_session(pki, "dialer")], [wire_session(pki, "binder")])
        two.after_hello = full_state([wire_session(pki, "dialer"), wire_session(pki, "binder")])
        async with Plane(pki, [one, two], edge) as plane:
            sessions = plane.clients[0].api_sessions
            await until(lambda: len(plane.up()) == 2, "both control connections up")
            await one.settle()
            await two.settle()
            assert sessions.synced.is_set()
            assert sorted(sessions.ids()) == ["as-binder", "as-dialer"]
            assert edge.closed == []

            two.hello_answer = refuse
            two.channel.close()
            await until(lambda: len(plane.up()) == 1, "one connection down")
            assert sessions.synced.is_set()  # one's state still holds

            two.after_hello = full_state([wire_session(pki, "binder")])  # dialer's session ended
            two.hello_answer = lambda hello: Controller.welcome(hello)
            await until(lambda: len(plane.up()) == 2 and edge.closed == [["as-dialer"]], "two's new state")
            assert sessions.ids() == ["as-binder"]


@run_async
async def test_the_routers_listed_are_the_union_of_the_connected_controllers_lists(pki: Pki) -> None:
    seen: list[list[str]] = []
    async with Controller(pki) as one, Controller(pki) as two:
        one.after_hello = [
            control.message(ROUTER_LINKS, {"routers": [{"id": "r-2", "linkListener": "tls://b:1"}]})
        ]
        two.after_hello = [
            control.message(ROUTER_LINKS, {"routers": [{"id": "r-3", "linkListener": "tls://c:1"}]})
        ]
        async with Plane(pki, [one, two], Edge()) as plane:
            plane.on_router_links = lambda links: seen.append(sorted(link.id for link in links))
            await until(lambda: len(plane.up()) == 2, "both control connections up")
            await one.settle()
            await two.settle()
            assert sorted(link.id for link in plane.router_links) == ["r-2", "r-3"]

            one.after_hello = []
            for channel in one.channels:
                channel.close()
            await until(lambda: [link.id for link in plane.router_links] == ["r-3"], "one's list dropped")
            assert seen[-1] == ["r-3"]
            assert plane.router_links == [RouterLink(id="r-3", name="", link_listener="tls://c:1")]


# -- the addresses -----------------------------------------------------------------------------------
def test_enrollment_keeps_every_ctrls_entry() -> None:
    claims = {
        "ctrls": ["tls:ctrl-a.example:6262", "tls://[::1]:6363", "tls:ctrl-a.example:6262", "nonsense", 7]
    }
    assert controller_addresses(claims, "jwt.example") == ["ctrl-a.example:6262", "[::1]:6363"]
    assert controller_addresses({}, "jwt.example") == ["jwt.example:6262"]
    assert controller_addresses({"ctrls": []}, "jwt.example") == ["jwt.example:6262"]
    assert split_addresses("a:1, b:2,,a:1") == ["a:1", "b:2"]


def enrolled(directory: Path, config: dict[str, Any]) -> Path:
    directory.mkdir(mode=0o700)
    for name in (identity.KEY, identity.CERT, identity.SERVER_CERT, identity.CA):
        (directory / name).write_text("unread here")
    (directory / identity.KEY).chmod(0o600)
    (directory / identity.CONFIG).write_text(json.dumps(config))
    return directory


BASE = {
    "id": "r",
    "name": "n",
    "controller": "https://c:1",
    "edge": "0.0.0.0:3022",
    "advertise": "er.example",
}


def test_a_record_keeps_every_controller_and_an_old_one_with_only_ctrl_still_loads(tmp_path: Path) -> None:
    old = identity.load(enrolled(tmp_path / "old", {**BASE, "ctrl": "c:6262"}))
    assert (old.ctrl, old.ctrls, old.ctrl_addresses) == ("c:6262", (), ["c:6262"])

    record = old.with_ctrls(["a:1", "b:2"])
    identity.write(
        tmp_path / "new", record, identity.new_key(), "cert", "server", "ca"
    )  # what enrollment writes, files and all
    written = json.loads((tmp_path / "new" / identity.CONFIG).read_text())
    assert (written["ctrl"], written["ctrls"]) == ("a:1", ["a:1", "b:2"])
    again = identity.load(tmp_path / "new")
    assert again == record
    assert again.ctrl_addresses == ["a:1", "b:2"]
    assert again.with_ctrls(["c:3"]).ctrl_addresses == ["c:3"]  # TRELLIS_ROUTER_CTRL of one

    with pytest.raises(identity.IdentityError, match="ctrls"):
        identity.load(enrolled(tmp_path / "bad", {**BASE, "ctrl": "c:6262", "ctrls": "c:6262"}))


def test_trellis_router_ctrl_takes_one_address_or_several() -> None:
    assert Settings.from_env({"TRELLIS_ROUTER_CTRL": "127.0.0.1:6262"}).router_ctrl == "127.0.0.1:6262"
    both = Settings.from_env({"TRELLIS_ROUTER_CTRL": "ctrl-a.example:6262, [::1]:6363"}).router_ctrl
    assert both == "ctrl-a.example:6262,[::1]:6363"
    assert split_addresses(both) == ["ctrl-a.example:6262", "[::1]:6363"]
    for bad in ("a:1,,b:2", "a:1,b", "a:1,b:99999"):
        with pytest.raises(SettingError, match="TRELLIS_ROUTER_CTRL"):
            Settings.from_env({"TRELLIS_ROUTER_CTRL": bad})


# -- the router process --------------------------------------------------------------------------------
class ServerPki:
    """What a stand-in :class:`Controller` needs: a server certificate of the router's CA."""

    def __init__(self, ca: Ca, directory: Path) -> None:
        self.ca_file = directory / "ca.pem"
        self.pair = write_pair(directory, "controller", *ca.issue("controller", server=True))

    def controller_server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.pair.cert_file, self.pair.key_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=self.ca_file)
        return ctx


@run_async
async def test_the_router_process_connects_to_every_controller_of_its_record(tmp_path: Path) -> None:
    """``serve`` with two controllers and an address nobody listens on, first: waiting for a
    controller to accept, then a control connection to each."""
    ca = Ca("HA Network CA")
    directory = router_dir(tmp_path, ca, "router-1")
    (tmp_path / "ca.pem").write_bytes((directory / identity.CA).read_bytes())
    server_pki: Any = ServerPki(ca, tmp_path)
    nobody = Controller(server_pki)
    await nobody.__aenter__()
    dead = nobody.address
    await nobody.__aexit__(None, None, None)
    async with Controller(server_pki) as one, Controller(server_pki) as two:
        record = identity.RouterRecord(
            id="router-1",
            name="router-one",
            controller="https://127.0.0.1:1",
            ctrl=dead,
            edge="127.0.0.1:0",
            advertise="127.0.0.1",
        ).with_ctrls([dead, one.address, two.address])
        stop = asyncio.Event()
        running = asyncio.ensure_future(serve(directory, record, stop, await_controller=True))
        try:
            await until(lambda: one.hellos != [] and two.hellos != [], "a hello to each controller")
            assert json.loads(one.hellos[0].body)["tunneler"] is True
        finally:
            stop.set()
            await within(running)
