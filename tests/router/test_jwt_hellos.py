"""SDK hellos carrying an OIDC access token (router.tokens, router.edge; docs/dataplane.md §4):
tokens signed with real keys (the controller's :class:`pki.tokens.JwtSigner`), test SDKs over
real TLS, and for the keys' way in, the router's real control client against a stand-in
controller that sends ``SIGNING_KEYS``, and the controller's real control listener sending them."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from channel import control
from channel.control import API_SESSION_REMOVED, CREATE_TERMINATOR, CREATE_TERMINATOR_REPLY, SIGNING_KEYS
from channel.edge import BIND, STATE_CONNECTED, UPDATE_TOKEN, UPDATE_TOKEN_FAILURE, UPDATE_TOKEN_SUCCESS
from channel.frames import RESULT, RESULT_SUCCESS, Message
from controller.settings import Settings
from engine.managers.controllers import Joining
from pki.tokens import JwtSigner
from router.edge import EdgeListener, Phase
from router.ports import ApiSession, ApiSessions
from router.tokens import Revocations, SigningKeys, TokenRefused, is_bearer
from tests.api.control_helpers import enrolled_router, start_plane
from tests.conftest import Api
from tests.router.helpers import Pki, Sdk, caller, run_async, until, within
from tests.router.test_control import Controller, Running, full_state, wire_session
from tests.router.test_edge import Router


def signer(name: str, *, rsa_key: bool = True) -> JwtSigner:
    """A controller's signer: a key and a self-signed certificate (``kid`` its fingerprint)."""
    key: Any = rsa.generate_private_key(65537, 2048) if rsa_key else ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return JwtSigner(key, cert)


@pytest.fixture(scope="module")
def ctrl_a() -> JwtSigner:
    return signer("controller-a")


@pytest.fixture(scope="module")
def ctrl_b() -> JwtSigner:
    return signer("controller-b", rsa_key=False)


@pytest.fixture(scope="module")
def rogue() -> JwtSigner:
    return signer("controller-a")  # the same name, another key


def claims(pki: Pki, who: str, **changes: Any) -> dict[str, Any]:
    """An access token's claims as the controllers issue them, for ``who``'s API session."""
    now = int(time.time())
    values: dict[str, Any] = {
        "iss": "https://ctrl-a.example:1280/oidc",
        "sub": f"id-{who}",
        "aud": ["native"],
        "jti": "j-1",
        "iat": now,
        "nbf": now,
        "exp": now + 1800,
        "z_t": "a",
        "z_asid": f"as-{who}",
        "z_cfs": [pki.identities[who].fingerprint] if who in pki.identities else None,
        "z_aid": "native",
    }
    values.update(changes)
    return {k: v for k, v in values.items() if v is not ...}


def token(signer: JwtSigner, pki: Pki, who: str, **changes: Any) -> str:
    return signer.sign(claims(pki, who, **changes))


def unsigned(pki: Pki, who: str) -> str:
    """``alg: none`` with the kid of a known key."""
    return jwt.encode(claims(pki, who), "", algorithm="none", headers={"kid": "x"})


def tampered(signed: str, **changes: Any) -> str:
    head, body, sig = signed.split(".")
    values = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    values.update(changes)
    new = base64.urlsafe_b64encode(json.dumps(values).encode()).rstrip(b"=").decode()
    return f"{head}.{new}.{sig}"


class JwtRouter(Router):
    """The test edge listener, its API sessions known (``dialer`` and ``binder``, pushed and
    synced) and the keys of ``ctrl_a`` and ``ctrl_b`` held."""

    def __init__(self, pki: Pki, *signers: JwtSigner, synced: bool = True, **options: Any) -> None:
        super().__init__(pki, **options)
        for i, each in enumerate(signers):
            self.api_sessions.signing_keys.put(each.public_jwks(), source=i)
        if synced:
            self.api_sessions.begin_full_state()
            held = [self.api_sessions.by_id(f"as-{who}") for who in ("dialer", "binder")]
            self.api_sessions.add_full_state([s for s in held if s is not None], True)
        else:
            self.api_sessions.remove(["as-dialer", "as-binder"])
            self.api_sessions.revoked = Revocations()

    async def __aenter__(self) -> JwtRouter:
        await super().__aenter__()
        return self

    async def jwt_sdk(self, who: str, bearer: str, *, cert: str | None = None) -> tuple[Sdk, Message | None]:
        """``who``'s SDK saying hello with ``bearer``: the answer, or None when the router closed
        the connection unanswered (a refusal)."""
        sdk = await self.connect(who, cert=cert)
        try:
            return sdk, await sdk.hello(bearer)
        except Exception:
            await sdk.closed()
            return sdk, None


def accepted(answer: Message | None) -> bool:
    return answer is not None and answer.content_type == RESULT and answer.flag(RESULT_SUCCESS)


# -- the token alone ---------------------------------------------------------------------------------
def test_bearer_tokens_are_told_from_legacy_tokens() -> None:
    assert is_bearer("eyJhbGciOi.eyJzdWIi.c2ln")
    assert not is_bearer("3f1c0d5e-0b7a-4c0e-9d55-6b1f7f0e2a11")
    assert not is_bearer("eyJhbGciOi.eyJzdWIi")


def test_keys_merge_per_source_and_a_source_replaces_its_own(
    ctrl_a: JwtSigner, ctrl_b: JwtSigner, pki: Pki
) -> None:
    keys = SigningKeys()
    assert keys.put(ctrl_a.public_jwks(), source="a") == 1
    assert keys.put([*ctrl_a.public_jwks(), *ctrl_b.public_jwks()], source="b") == 2
    assert keys.kids() == sorted([ctrl_a.kid, ctrl_b.kid])
    keys.put(ctrl_a.public_jwks(), source="b")  # b no longer lists b's key, nor does a
    assert keys.kids() == [ctrl_a.kid]
    keys.put(ctrl_b.public_jwks(), source="c")
    keys.forget("c")  # a controller removed from the network
    assert keys.kids() == [ctrl_a.kid]
    with pytest.raises(TokenRefused, match="no controller's key"):
        keys.verify(token(ctrl_b, pki, "dialer"))
    # junk is skipped, not fatal
    assert keys.put([{"kid": "k", "kty": "RSA", "n": "AQ"}, {"kty": "EC"}, {"kid": 3}], source="c") == 0
    claims_seen = keys.verify(token(ctrl_a, pki, "dialer"))
    assert (claims_seen.api_session_id, claims_seen.identity_id) == ("as-dialer", "id-dialer")
    assert claims_seen.fingerprints == {pki.identities["dialer"].fingerprint}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"z_t": "r"}, "not an access token"),
        ({"aud": ["some-other-client"]}, "audience"),
        ({"aud": "openziti"}, None),
        ({"exp": -120}, "expired"),  # exp and nbf: seconds from when the test runs
        ({"exp": ...}, "no exp"),
        ({"nbf": 600}, "not valid yet"),
        ({"z_asid": ...}, "names no API session"),
        ({"sub": ""}, "names no API session"),
    ],
)
def test_claims_are_checked(ctrl_a: JwtSigner, pki: Pki, change: dict[str, Any], reason: str | None) -> None:
    keys = SigningKeys()
    keys.put(ctrl_a.public_jwks())
    now = int(time.time())
    change = {k: now + v if k in ("exp", "nbf") and isinstance(v, int) else v for k, v in change.items()}
    signed = token(ctrl_a, pki, "dialer", **change)
    if reason is None:
        assert keys.verify(signed).api_session_id == "as-dialer"
    else:
        with pytest.raises(TokenRefused, match=reason):
            keys.verify(signed)


def test_signatures_are_checked(ctrl_a: JwtSigner, rogue: JwtSigner, pki: Pki) -> None:
    keys = SigningKeys()
    keys.put(ctrl_a.public_jwks())
    with pytest.raises(TokenRefused, match="no controller's key"):
        keys.verify(token(rogue, pki, "dialer"))
    other_key = rsa.generate_private_key(65537, 2048)
    posing = jwt.encode(claims(pki, "dialer"), other_key, algorithm="RS256", headers={"kid": ctrl_a.kid})
    with pytest.raises(TokenRefused, match="does not verify"):
        keys.verify(posing)
    forged = jwt.encode(claims(pki, "dialer"), "s" * 64, algorithm="HS256", headers={"kid": ctrl_a.kid})
    with pytest.raises(TokenRefused, match="alg"):
        keys.verify(forged)
    with pytest.raises(TokenRefused, match="no controller's key"):
        keys.verify(unsigned(pki, "dialer"))
    with pytest.raises(TokenRefused, match="does not verify"):
        keys.verify(tampered(token(ctrl_a, pki, "dialer"), sub="id-binder", z_asid="as-binder"))
    with pytest.raises(TokenRefused, match="not a JWT"):
        keys.verify("not-a-jwt")


def test_a_session_listed_again_is_no_longer_revoked(pki: Pki) -> None:
    sessions = ApiSessions()
    listed = ApiSession(id="as-x", token_hash="h", identity_id="id-x", identity_name="x")
    sessions.put(listed)
    sessions.remove(["as-x"])
    assert "as-x" in sessions.revoked
    sessions.put(listed)  # a controller that saw the login after another's full state missed it
    assert "as-x" not in sessions.revoked
    sessions.begin_full_state("a")
    sessions.add_full_state([], True, "a")
    assert "as-x" in sessions.revoked
    sessions.begin_full_state("b")
    sessions.add_full_state([listed], True, "b")
    assert "as-x" not in sessions.revoked


def test_revocations_are_kept_for_a_while_and_bounded() -> None:
    revoked = Revocations(keep_seconds=60, limit=3)
    revoked.add(["a", "b"])
    assert "a" in revoked
    assert "c" not in revoked
    revoked.add(["c", "d"])
    assert len(revoked) == 3
    assert "a" not in revoked
    revoked.add(["e"], now=time.monotonic() + 120)  # the others are now older than the keep
    assert len(revoked) == 1
    assert "e" in revoked


# -- hellos ----------------------------------------------------------------------------------------
@run_async
async def test_a_jwt_hello_opens_the_channel_as_its_api_session_and_binds_as_any(
    pki: Pki, ctrl_a: JwtSigner, ctrl_b: JwtSigner
) -> None:
    async with JwtRouter(pki, ctrl_a, ctrl_b) as router:
        binder, answer = await router.jwt_sdk("binder", token(ctrl_b, pki, "binder"))
        assert accepted(answer)
        side = router.side("binder")
        assert side.bearer is not None
        assert side.bearer.kid == ctrl_b.kid
        reply = await binder.ask(binder.edge(BIND, 0, b"bind-1", caller("binder")))
        assert reply.content_type == STATE_CONNECTED
        call = router.controller.terminator_calls[-1]
        assert call["api_session_id"] == "as-binder"
        assert call["fingerprints"][0] == pki.identities["binder"].fingerprint
        await until(lambda: router.controller.channel_notices[-1:] == [(["as-binder"], [])], "opened")
        # the controllers end the API session: the channel closes
        router.api_sessions.remove(["as-binder"])
        router.listener.close_api_sessions(["as-binder"])
        await binder.closed()
        # and its tokens open no channel again
        _, again = await router.jwt_sdk("binder", token(ctrl_b, pki, "binder"))
        assert again is None


@run_async
async def test_jwt_hellos_that_fail_are_closed_unanswered(
    pki: Pki, ctrl_a: JwtSigner, rogue: JwtSigner
) -> None:
    refused = {
        "another key": token(rogue, pki, "dialer"),
        "alg none": unsigned(pki, "dialer"),
        "another audience": token(ctrl_a, pki, "dialer", aud=["elsewhere"]),
        "expired": token(ctrl_a, pki, "dialer", exp=int(time.time()) - 120),
        "not yet valid": token(ctrl_a, pki, "dialer", nbf=int(time.time()) + 600),
        "a refresh token": token(ctrl_a, pki, "dialer", z_t="r"),
        "tampered": tampered(token(ctrl_a, pki, "dialer"), exp=int(time.time()) + 99999),
        "unknown API session": token(ctrl_a, pki, "dialer", z_asid="as-nobody"),
        "another identity's session": token(ctrl_a, pki, "dialer", sub="id-binder", z_asid="as-binder"),
    }
    async with JwtRouter(pki, ctrl_a, api_session_wait=0.1) as router:
        for what, bearer in refused.items():
            _, answer = await router.jwt_sdk("dialer", bearer)
            assert answer is None, what
        # a certificate that is not the API session's (the token's z_cfs does not matter then)
        _, answer = await router.jwt_sdk("stranger", token(ctrl_a, pki, "dialer"), cert="stranger")
        assert answer is None
        assert router.listener.api_session_ids() == []
        _, answer = await router.jwt_sdk("dialer", token(ctrl_a, pki, "dialer"))
        assert accepted(answer)


@run_async
async def test_without_the_controllers_state_the_token_alone_decides(pki: Pki, ctrl_a: JwtSigner) -> None:
    """No controller's state held (none reachable since the router started, keys kept): a valid
    token opens a channel if the certificate is one its login presented (``z_cfs``), unless its
    API session was removed."""
    async with JwtRouter(pki, ctrl_a, synced=False, api_session_wait=0.1) as router:
        assert not router.api_sessions.synced.is_set()
        _, answer = await router.jwt_sdk("dialer", token(ctrl_a, pki, "dialer"))
        assert accepted(answer)
        assert router.side("dialer").api_session is not None
        _, answer = await router.jwt_sdk("binder", token(ctrl_a, pki, "binder", z_cfs=None))
        assert answer is None
        router.api_sessions.revoked.add(["as-binder"])
        _, answer = await router.jwt_sdk("binder", token(ctrl_a, pki, "binder"))
        assert answer is None


# -- UpdateToken -----------------------------------------------------------------------------------
async def update(sdk: Sdk, bearer: str) -> Message:
    return await sdk.ask(Message(UPDATE_TOKEN, bearer.encode()))


@run_async
async def test_update_token_replaces_the_channels_token(
    pki: Pki, ctrl_a: JwtSigner, ctrl_b: JwtSigner
) -> None:
    async with JwtRouter(pki, ctrl_a, ctrl_b) as router:
        dialer, answer = await router.jwt_sdk(
            "dialer", token(ctrl_a, pki, "dialer", exp=int(time.time()) + 60)
        )
        assert accepted(answer)
        first = router.side("dialer").bearer
        assert first is not None

        later = int(time.time()) + 1800
        reply = await update(dialer, token(ctrl_b, pki, "dialer", exp=later))  # refreshed at the other
        assert reply.content_type == UPDATE_TOKEN_SUCCESS, reply.body
        now = router.side("dialer").bearer
        assert now is not None
        assert now.expires_at == later
        assert now.kid == ctrl_b.kid

        for bad in (
            token(ctrl_a, pki, "dialer", exp=int(time.time()) - 120),
            token(ctrl_a, pki, "binder"),  # another identity's
            tampered(token(ctrl_a, pki, "dialer"), exp=later + 5),
            "b2d1e2c6-legacy-token",
        ):
            reply = await update(dialer, bad)
            assert reply.content_type == UPDATE_TOKEN_FAILURE, bad
            assert reply.body
        assert router.side("dialer").bearer == now
        assert router.side("dialer").phase is Phase.OPEN

        # a new login of the same identity (a new API session the controllers pushed) moves the channel
        router.api_sessions.put(
            ApiSession(
                id="as-dialer-2",
                token_hash="oidc-rt:x",
                identity_id="id-dialer",
                identity_name="dialer",
                fingerprints=frozenset({pki.identities["dialer"].fingerprint}),
            )
        )
        reply = await update(dialer, token(ctrl_a, pki, "dialer", z_asid="as-dialer-2"))
        assert reply.content_type == UPDATE_TOKEN_SUCCESS, reply.body
        assert router.listener.api_session_ids() == ["as-dialer-2"]
        router.listener.close_api_sessions(["as-dialer"])  # the old one ending no longer closes it
        await asyncio.sleep(0)
        (moved,) = router.listener.channels()
        assert moved.is_open
        assert moved.api_session is not None
        assert moved.api_session.id == "as-dialer-2"


@run_async
async def test_update_token_on_a_legacy_channel_fails(pki: Pki, ctrl_a: JwtSigner) -> None:
    async with JwtRouter(pki, ctrl_a) as router:
        legacy = await router.sdk("dialer")
        reply = await update(legacy, token(ctrl_a, pki, "dialer"))
        assert reply.content_type == UPDATE_TOKEN_FAILURE
        assert b"not opened with a bearer token" in reply.body
        assert router.side("dialer").bearer is None


# -- the keys over the control connection ----------------------------------------------------------
@run_async
async def test_keys_come_over_the_control_connection_before_the_state(pki: Pki, ctrl_a: JwtSigner) -> None:
    """The stand-in controller sends ``SIGNING_KEYS`` then the full state, as the controller's
    control listener does; an SDK's JWT hello then passes, Binds go to that controller with the
    token's API session, and an ``API_SESSION_REMOVED`` closes the channel."""
    sessions = ApiSessions()
    async with Controller(pki) as controller:
        controller.after_hello = [
            control.message(SIGNING_KEYS, {"keys": ctrl_a.public_jwks()}),
            *full_state([wire_session(pki, "binder")]),
        ]
        async with Running(pki, controller, None, api_sessions=sessions) as client:
            listener = EdgeListener(
                ssl_context=pki.edge_server_context(),
                controller=client,
                api_sessions=sessions,
                router_id="r-1",
                version="v0.1.0",
            )
            client.edge = listener
            await listener.start("127.0.0.1", 0)
            binder = await Sdk.connect(listener.port, pki.sdk_context("binder"), "binder")
            try:
                answer = await binder.hello(token(ctrl_a, pki, "binder"))
                assert accepted(answer)
                assert sessions.signing_keys.kids() == [ctrl_a.kid]
                binding = asyncio.ensure_future(
                    binder.ask(binder.edge(BIND, 0, b"bind-tok", caller("binder")))
                )
                request = await controller.next(CREATE_TERMINATOR)
                assert json.loads(request.body)["apiSessionId"] == "as-binder"
                body = {"terminatorId": "t-7", "sessionId": "s-7", "serviceId": "svc"}
                controller.channel.send(control.message(CREATE_TERMINATOR_REPLY, body).reply_to(request))
                assert (await within(binding)).content_type == STATE_CONNECTED
                controller.channel.send(control.message(API_SESSION_REMOVED, {"ids": ["as-binder"]}))
                await binder.closed()
                assert "as-binder" in sessions.revoked
            finally:
                binder.channel.close()
                await listener.stop()


# -- the controller's side -------------------------------------------------------------------------
@pytest.fixture
def settings(home: Path) -> Settings:
    """The control listener on a free port of the loopback."""
    return Settings(home=home, bind="127.0.0.1:1280", ctrl_bind="127.0.0.1:0", db_writer="thread")


def test_the_controller_sends_its_keys_before_the_state_and_again_when_a_controller_joins(
    api: Api, tmp_path: Path, ctrl_b: JwtSigner
) -> None:
    api.app.join_network()
    plane = start_plane(api, tmp_path)
    try:
        link = plane.connect(enrolled_router(api))
        link.hello()
        first = link.take(SIGNING_KEYS)
        assert not [m for m in link.recorder.backlog if m.content_type == control.API_SESSION_ADDED]
        assert first == api.ctrl.managers.oidc.jwks()
        assert [k["kid"] for k in first["keys"]] == [api.ctrl.env.tokens.kid]
        link.full_state()

        pem = ctrl_b.certificate.public_bytes(serialization.Encoding.PEM).decode()
        joining = Joining(
            id="ctrl-b",
            name="ctrl-b",
            ctrl_address="tls:127.0.0.2:6262",
            cert_pem=pem,
            fingerprint=ctrl_b.kid,
        )
        api.ctrl.managers.controllers.join(joining)
        joined = link.take(SIGNING_KEYS)
        assert [k["kid"] for k in joined["keys"]] == [api.ctrl.env.tokens.kid, ctrl_b.kid]
        keys = SigningKeys()  # what a router makes of them: ctrl-b's tokens verify
        keys.put(joined["keys"])
        assert keys.verify(ctrl_b.sign(claims_for("as-1", "id-1"))).api_session_id == "as-1"
    finally:
        plane.close()


def claims_for(session_id: str, identity_id: str) -> dict[str, Any]:
    now = int(time.time())
    return {
        "sub": identity_id,
        "aud": ["openziti"],
        "exp": now + 60,
        "nbf": now,
        "z_t": "a",
        "z_asid": session_id,
    }
