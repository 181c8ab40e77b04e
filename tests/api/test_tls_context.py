"""The listener's ``SSLContext`` (``controller.tls``): a client certificate of any issuer passes the
handshake, which still hands over exactly the chain the client sent (leaf first).

Handshakes run in memory (``ssl.MemoryBIO``) between the context and a client presenting a
certificate from a CA the context does not trust.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from controller.tls import build_context
from pki import PkiPaths
from pki.tls import ServerContext, accept_any_client_certificate, peer_cert_chain
from tests.api.certs import ThirdPartyCa, key_pem

VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]


@pytest.fixture(scope="module")
def paths(pki_template: Path) -> PkiPaths:
    return PkiPaths.in_directory(pki_template)


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, tuple[bytes, ...]]:
    """A client certificate (with its CA sent along) from a CA nobody trusts: files and DER chain."""
    ca = ThirdPartyCa("Unit Stranger CA")
    leaf, key = ca.issue("stranger")
    directory = tmp_path_factory.mktemp("stranger")
    (directory / "c.pem").write_text(leaf + ca.pem)
    (directory / "c.key").write_text(key_pem(key))
    ders = (
        x509.load_pem_x509_certificate(leaf.encode()).public_bytes(serialization.Encoding.DER),
        ca.cert.public_bytes(serialization.Encoding.DER),
    )
    return str(directory / "c.pem"), str(directory / "c.key"), ders


def client_context(pair: tuple[str, str], version: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.maximum_version = version
    ctx.load_cert_chain(*pair)
    return ctx


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[bytes, ...]:
    """A handshake plus one byte of application data; the chain the serving worker reads from the
    server's side (:func:`pki.tls.peer_cert_chain`: DER, leaf first). Raises ``ssl.SSLError``
    when either side refuses."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    from_server, from_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(to_server, from_server, server_side=True)
    client = client_ctx.wrap_bio(to_client, from_client, server_side=False)
    done = {"server": False, "client": False}
    for _ in range(8):
        for name, side, out, peer_in in (
            ("client", client, from_client, to_server),
            ("server", server, from_server, to_client),
        ):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done.values()):
            break
    client.write(b"x")  # TLS 1.3: the server judges the client's certificate after its Finished
    to_server.write(from_client.read())
    assert server.read(1) == b"x"
    # What asyncio's TLS transport answers to get_extra_info("ssl_object").
    return peer_cert_chain(asyncio.BaseTransport(extra={"ssl_object": server}))


@pytest.mark.parametrize("version", VERSIONS, ids=["tls12", "tls13"])
def test_any_client_certificate_passes_and_arrives_as_sent(
    paths: PkiPaths, stranger: tuple[str, str, tuple[bytes, ...]], version: ssl.TLSVersion
) -> None:
    ctx = build_context(paths, [paths.ca_bundle.read_text()])
    assert ctx.accepts_any_client_cert  # CPython 3.11 with its own OpenSSL: the hook is installed
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    chain = handshake(ctx, client_context(stranger[:2], version))
    assert chain == stranger[2]  # the leaf first, then what the client sent; nothing verified or added


@pytest.mark.parametrize("version", VERSIONS, ids=["tls12", "tls13"])
def test_a_context_left_alone_refuses_the_same_certificate(
    paths: PkiPaths, stranger: tuple[str, str, tuple[bytes, ...]], version: ssl.TLSVersion
) -> None:
    """What the hook changes (and the fallback when it cannot be installed): the handshake fails."""
    ctx = ServerContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(paths.server_cert), str(paths.server_key))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cadata=paths.ca_bundle.read_text())
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client_context(stranger[:2], version))


def test_only_a_server_context_asking_for_optional_certificates_is_changed(
    paths: PkiPaths, stranger: tuple[str, str, tuple[bytes, ...]]
) -> None:
    ctx = ServerContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(paths.server_cert), str(paths.server_key))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=paths.ca_bundle.read_text())

    assert accept_any_client_certificate(ctx) is not None
    assert not ctx.accepts_any_client_cert
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client_context(stranger[:2], ssl.TLSVersion.TLSv1_3))


def test_a_client_without_a_certificate_still_connects(paths: PkiPaths) -> None:
    ctx = build_context(paths, [paths.ca_bundle.read_text()])
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    assert handshake(ctx, client) == ()
