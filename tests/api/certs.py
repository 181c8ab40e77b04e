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
    serving worker reports a TLS handshake's verified chain."""
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
    chain: str  # leaf + intermediate, as ``/enroll/ott`` answers
    key: Key

    @property
    def leaf(self) -> str:
        return first_pem(self.chain)


def first_pem(chain: str) -> str:
    """The first PEM block of ``chain``."""
    end = "-----END CERTIFICATE-----"
    return chain.split(end, 1)[0] + end + "\n"


def enroll_ott(api: Any, name: str, *, key: Key | None = None) -> NetworkCert:
    """A new non-admin identity enrolled with ``ott``: it holds a cert authenticator."""
    created = api.post(
        "/identities", json={"name": name, "type": "User", "isAdmin": False, "enrollment": {"ott": True}}
    )
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
    return NetworkCert(identity_id=identity_id, chain=str(enrolled.json["data"]["cert"]), key=leaf_key)


def verified_ca(api: Any, ca: ThirdPartyCa, name: str = "third-party", **flags: Any) -> str:
    """``POST /cas`` (``isAuthEnabled`` unless ``flags`` say otherwise) and verify it; its id."""
    body = {
        "name": name,
        "certPem": ca.pem,
        "isAuthEnabled": True,
        "isAutoCaEnrollmentEnabled": False,
        "isOttCaEnrollmentEnabled": False,
        "identityRoles": [],
        **flags,
    }
    created = api.post("/cas", json=body)
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
