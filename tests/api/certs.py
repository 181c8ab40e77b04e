"""Builders for API tests that need real keys and certificates: CSRs, third-party CAs, and the
WSGI environ a TLS client certificate arrives in. Builders set up state and never assert."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from api.peer import PEER_CHAIN_KEY
from tests.unit.pki.conftest import ECDSA_WITH_SHA256, NETSCAPE_CERT_TYPE, SSL_CLIENT, der_tlv

Key = ec.EllipticCurvePrivateKey


def new_key() -> Key:
    """An EC P-256 key (what the OpenZiti C SDK generates)."""
    return ec.generate_private_key(ec.SECP256R1())


def csr_pem(key: Key | None = None, cn: str = "device") -> str:
    """A PEM CSR signed by ``key`` (a new key when None)."""
    signer = key if key is not None else new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(signer, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM).decode("ascii")


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def tls(*chain: str) -> dict[str, Any]:
    """``extras`` for ``simulate_request``: the client certificate chain (PEM, leaf first) as the
    serving worker reports the chain a TLS handshake presented."""
    return {PEER_CHAIN_KEY: tuple(ssl.PEM_cert_to_DER_cert(c) for c in chain)}


@dataclass
class ThirdPartyCa:
    """A self-signed CA outside our PKI that issues client certificates."""

    name: str = "Acme Root CA"
    key: Key = field(default_factory=new_key)
    cert: x509.Certificate = field(init=False)

    def __post_init__(self) -> None:
        now = datetime.now(UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> str:
        return pem(self.cert)

    def issue(
        self,
        cn: str,
        *,
        uris: tuple[str, ...] = (),
        emails: tuple[str, ...] = (),
        not_before: datetime | None = None,
        not_after: datetime | None = None,
        key: Key | None = None,
    ) -> tuple[str, Key]:
        """A client certificate (PEM) and its key."""
        leaf_key = key if key is not None else new_key()
        now = datetime.now(UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(self.cert.subject)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before or now - timedelta(hours=1))
            .not_valid_after(not_after or now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(u) for u in uris]
        names += [x509.RFC822Name(e) for e in emails]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return pem(builder.sign(self.key, hashes.SHA256())), leaf_key

    def verification_cert(self, token: str) -> str:
        """The proof of possession for ``POST /cas/{id}/verify``: CN = the verification token."""
        return self.issue(token)[0]


def key_pem(key: Key) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode("ascii")


# -- certificates from our CA, verified third-party CAs (need a logged-in admin ``Api``) ----------
@dataclass
class NetworkCert:
    """A client certificate our CA issued to an identity through ``ott`` enrollment."""

    identity_id: str
    chain: str  # leaf + intermediate, the PEM text ``/enroll/ott`` answers
    key: Key

    @property
    def leaf(self) -> str:
        return first_pem(self.chain)


def first_pem(chain: str) -> str:
    """The first PEM block of ``chain``."""
    end = "-----END CERTIFICATE-----"
    return chain.split(end, 1)[0] + end + "\n"


def enroll_ott(api: Any, name: str, *, key: Key | None = None, **fields: Any) -> NetworkCert:
    """A new non-admin identity enrolled with ``ott``: it holds a cert authenticator. ``fields``
    add to (or replace) the identity's create body, e.g. ``authPolicyId``."""
    body = {"name": name, "type": "User", "isAdmin": False, "enrollment": {"ott": True}, **fields}
    created = api.post("/identities", json=body)
    if created.status_code != 201:
        raise RuntimeError(created.text)
    identity_id = str(created.json["data"]["id"])
    token = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]["token"]
    leaf_key = key if key is not None else new_key()
    enrolled = api.client.simulate_post(
        "/edge/client/v1/enroll/ott", json={"token": token, "clientCsr": csr_pem(leaf_key)}
    )
    if enrolled.status_code != 200:
        raise RuntimeError(enrolled.text)
    # the spec's JSON body is answered JSON, as OpenZiti v1.6.0 answers it
    return NetworkCert(identity_id=identity_id, chain=enrolled.json["data"]["cert"], key=leaf_key)


def ca_body(ca: ThirdPartyCa, name: str, **flags: Any) -> dict[str, Any]:
    """The body of ``POST /cas`` for ``ca``: ``isAuthEnabled`` and nothing else unless ``flags``
    say otherwise."""
    return {
        "name": name,
        "certPem": ca.pem,
        "isAuthEnabled": True,
        "isAutoCaEnrollmentEnabled": False,
        "isOttCaEnrollmentEnabled": False,
        "identityRoles": [],
        **flags,
    }


def verified_ca(api: Any, ca: ThirdPartyCa, name: str = "third-party", **flags: Any) -> str:
    """``POST /cas`` (:func:`ca_body`) and verify it; its id."""
    created = api.post("/cas", json=ca_body(ca, name, **flags))
    if created.status_code != 201:
        raise RuntimeError(created.text)
    ca_id = str(created.json["data"]["id"])
    token = api.get(f"/cas/{ca_id}").json["data"]["verificationToken"]
    verified = api.post(
        f"/cas/{ca_id}/verify", body=ca.verification_cert(token), headers={"content-type": "text/plain"}
    )
    if verified.status_code != 200:
        raise RuntimeError(verified.text)
    return ca_id


# -- CSR variants (appended for the enrollment tests) ------------------------------------------------
def _ecdsa_csr_pem(info: bytes, signature: bytes, *, null_parameter: bool = False) -> str:
    """A PEM CSR of a CertificationRequestInfo and its ``ecdsa-with-SHA256`` signature; with
    ``null_parameter`` the algorithm has an explicit NULL parameter (as mbedTLS writes it; DER
    leaves it out)."""
    oid = der_tlv(0x06, ECDSA_WITH_SHA256)
    algorithm = der_tlv(0x30, (oid + b"\x05\x00") if null_parameter else oid)
    return _csr_pem_of(der_tlv(0x30, info + algorithm + der_tlv(0x03, b"\x00" + signature)))


def _csr_pem_of(der: bytes) -> str:
    import base64

    text = base64.b64encode(der).decode("ascii")
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return (
        "-----BEGIN CERTIFICATE REQUEST-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE REQUEST-----\n"
    )


def mbedtls_csr_pem(key: Key | None = None, sub: str = "device", iss: str = "https://127.0.0.1:1280") -> str:
    """A PEM CSR as the OpenZiti C SDK (mbedTLS) writes it: ``ecdsa-with-SHA256`` with an explicit
    NULL parameter (the signature covers only the CertificationRequestInfo, so it stays valid)."""
    signer = key if key is not None else new_key()
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "OpenZiti"),
            x509.NameAttribute(NameOID.DOMAIN_COMPONENT, iss),
            x509.NameAttribute(NameOID.COMMON_NAME, sub),
        ]
    )
    usage = x509.KeyUsage(True, False, True, False, False, False, False, False, False)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(usage, critical=False)
        .add_extension(x509.UnrecognizedExtension(NETSCAPE_CERT_TYPE, SSL_CLIENT), critical=False)
        .sign(signer, hashes.SHA256())
    )
    return _ecdsa_csr_pem(csr.tbs_certrequest_bytes, csr.signature, null_parameter=True)


def san_csr_pem(
    key: Key | None = None, cn: str = "router", *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()
) -> str:
    """A PEM CSR asking for DNS and IP subject alternative names (a router's server CSR)."""
    import ipaddress

    signer = key if key is not None else new_key()
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode("ascii")


def tampered_csr_pem(key: Key | None = None, cn: str = "device") -> str:
    """A well-formed PEM CSR whose self-signature does not verify (its subject was changed)."""
    good = x509.load_pem_x509_csr(csr_pem(key, cn).encode())
    other = x509.load_pem_x509_csr(csr_pem(key, cn + "-x").encode())
    return _ecdsa_csr_pem(other.tbs_certrequest_bytes, good.signature)


def load_chain(text: str) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle, in order."""
    return x509.load_pem_x509_certificates(text.encode("ascii"))


def sha1_fingerprint(cert_pem: str) -> str:
    """OpenZiti's fingerprint of the first certificate of ``cert_pem``: lowercase hex SHA-1 of the DER."""
    cert = x509.load_pem_x509_certificate(cert_pem.encode("ascii"))
    return cert.fingerprint(hashes.SHA1()).hex()


def split_pems(text: str) -> list[str]:
    """Each PEM certificate block of ``text`` (a chain as the API answers it), in order."""
    end = "-----END CERTIFICATE-----"
    return [block.strip() + "\n" + end + "\n" for block in text.split(end)[:-1]]


def tls_chain(*texts: str) -> dict[str, Any]:
    """``tls`` for chains given as multi-block PEM text (e.g. ``/enroll/ott``'s ``cert``)."""
    return tls(*[block for text in texts for block in split_pems(text)])


def split_chain(text: str) -> list[str]:
    """Each certificate of a PEM bundle as its own PEM string (``tls(*split_chain(chain))``)."""
    return [pem(cert) for cert in load_chain(text)]


def public_key_der(pem_or_key: str | Key) -> bytes:
    """SubjectPublicKeyInfo DER of a certificate's (first PEM block) or a key's public key."""
    if isinstance(pem_or_key, str):
        public = x509.load_pem_x509_certificate(pem_or_key.encode("ascii")).public_key()
    else:
        public = pem_or_key.public_key()
    return public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def unique(prefix: str) -> str:
    """``prefix`` with a random suffix: names that do not collide in an app shared by a module."""
    import uuid

    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin_api(directory: Any, pki_template: Any, **collaborators: Any) -> Any:
    """A logged-in admin ``Api`` over a new app whose home is under ``directory`` (with the
    session PKI), for module-scoped fixtures; ``collaborators`` go to ``open_app`` (a clock, a
    JWT verifier). The caller closes ``controller.app.ctrl.env.store``."""
    from controller.settings import Settings
    from engine.managers.bootstrap import create_default_admin
    from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, new_home, open_app

    home = new_home(directory / "home", pki_template)
    # budgets off: a module's shared app sends thousands of requests (rate limits have their own tests)
    app = open_app(
        Settings(home=home, bind="127.0.0.1:1280", rate_auth_per_minute=0, rate_write_per_minute=0),
        **collaborators,
    )
    create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    api = Api(app)
    api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)
    return api
