"""The controller's JWT signer (``engine.ports.TokenSigner``): enrollment JWTs and their checks.

OpenZiti SDKs verify an enrollment JWT against the public key of the TLS leaf certificate they
receive when they first connect to the JWT's ``iss`` (docs/api.md §6.1),
so the signing key is the API listener's TLS key and the header is::

    {"alg": "RS256" | "ES256" | "ES384" | "ES512", "kid": <SHA-1 of the certificate>, "typ": "JWT"}

``alg`` follows the key (RSA → RS256; EC P-256/P-384/P-521 → ES256/ES384/ES512) and ``kid`` is
the lowercase hex SHA-1 of the certificate's DER (its OpenZiti fingerprint).

EC keys and the C SDK: standard JWS (RFC 7518 §3.4, what pyjwt writes) encodes an ECDSA signature
as raw ``r || s``, but the OpenZiti C SDK 0.29.3 (mbedTLS) only accepts a DER-encoded ECDSA
signature; 1.18.x tries DER then raw. We keep standard JWS for EC keys (every other JWT library
expects it) and avoid the issue instead: the server key :func:`pki.init_pki` creates is RSA, and
RS256 works with every SDK version.

The signer also publishes its public key as a JSON Web Key (RFC 7517; the client API's
``GET /enroll/jwks``) and signs a caller's nonce with the same key (``POST /enroll/challenge``), so
a device can check that the host it talks to holds the key behind the enrollment JWTs. A nonce
signature is a JWS signature (RFC 7515 §5.2 over the nonce's UTF-8 bytes as the signing input):
RSASSA-PKCS1-v1_5 for RS256, raw ``r || s`` for ES256/ES384/ES512, base64url without padding,
so any JOSE library verifies it with the published JWK.

Nothing here reads the clock: :meth:`JwtSigner.verify` checks ``exp`` only against a ``now`` it
is given.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from engine import ports
from engine.errors import FieldError
from pki._x509 import PrivateKey, as_utc, jws_algorithm, public_key_der
from pki.certs import fingerprint


class SigningIdentity(Protocol):
    """What signs the controller's JWTs: the API listener's TLS key and its certificate chain
    (``pki.authority.CertificateAuthority`` is one)."""

    @property
    def server_chain_pem(self) -> str: ...

    def signing_key_for_jwt(self) -> PrivateKey: ...


__all__ = ["JwtSigner", "jws_algorithm", "public_jwk"]

#: JWK ``crv`` names (RFC 7518 §6.2.1.1) of the curves we sign with.
_JWK_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _uint(value: int, size: int | None = None) -> str:
    """An unsigned big-endian integer, base64url (RFC 7518 §2 Base64urlUInt), ``size`` bytes if given."""
    length = size if size is not None else max(1, (value.bit_length() + 7) // 8)
    return _b64url(value.to_bytes(length, "big"))


def public_jwk(
    key: PrivateKey | rsa.RSAPublicKey | ec.EllipticCurvePublicKey,
    kid: str,
    chain: Sequence[x509.Certificate],
) -> dict[str, Any]:
    """The public JWK of ``key`` (private or public; RFC 7517/7518): its parameters, ``kid``,
    ``use``, ``alg`` and the certificate chain ``chain`` (leaf first) as ``x5c`` with the leaf's
    ``x5t``/``x5t#S256``."""
    public = key if isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey) else key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        numbers = public.public_numbers()
        params: dict[str, Any] = {"kty": "RSA", "n": _uint(numbers.n), "e": _uint(numbers.e)}
    elif isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name in _JWK_CURVES:
        point = public.public_numbers()
        size = (public.curve.key_size + 7) // 8
        params = {
            "kty": "EC",
            "crv": _JWK_CURVES[public.curve.name],
            "x": _uint(point.x, size),
            "y": _uint(point.y, size),
        }
    else:
        raise ValueError(f"no JWK for a {type(public).__name__} key")
    ders = [cert.public_bytes(serialization.Encoding.DER) for cert in chain]
    return {
        **params,
        "kid": kid,
        "use": "sig",
        "alg": jws_algorithm(key),
        "x5c": [base64.b64encode(der).decode("ascii") for der in ders],
        "x5t": _b64url(hashlib.sha1(ders[0]).digest()),  # RFC 7517 §4.8 names SHA-1
        "x5t#S256": _b64url(hashlib.sha256(ders[0]).digest()),
    }


class JwtSigner:
    """Signs compact JWS tokens with a TLS server key; verifies them with its certificate.

    ``chain`` is what certifies ``certificate`` (its intermediates, in order): published with
    the key as the JWK's ``x5c``.
    """

    def __init__(
        self, key: PrivateKey, certificate: x509.Certificate, chain: Sequence[x509.Certificate] = ()
    ) -> None:
        if public_key_der(key.public_key()) != public_key_der(certificate.public_key()):
            raise ValueError("the signing key does not match the certificate")
        self._key = key
        self._certificate = certificate
        self._algorithm = jws_algorithm(key)
        self._kid = fingerprint(certificate)
        self._jwk = public_jwk(key, self._kid, [certificate, *chain])

    @classmethod
    def for_authority(cls, ca: SigningIdentity) -> JwtSigner:
        """The signer of enrollment JWTs: the API listener's TLS key, certificate and chain."""
        leaf, *intermediates = x509.load_pem_x509_certificates(ca.server_chain_pem.encode())
        return cls(ca.signing_key_for_jwt(), leaf, intermediates)

    @property
    def algorithm(self) -> str:
        """The JOSE ``alg`` every token carries."""
        return self._algorithm

    @property
    def kid(self) -> str:
        """The JOSE ``kid``: lowercase hex SHA-1 of the certificate's DER."""
        return self._kid

    @property
    def certificate(self) -> x509.Certificate:
        """The certificate whose public key verifies the tokens."""
        return self._certificate

    def headers(self) -> dict[str, str]:
        """The JOSE header of every token."""
        return {"alg": self._algorithm, "kid": self._kid, "typ": "JWT"}

    def sign(self, claims: Mapping[str, Any]) -> str:
        """A compact JWS of ``claims`` (JSON-serialisable values) with :meth:`headers`."""
        return jwt.encode(
            dict(claims), self._key, algorithm=self._algorithm, headers={"kid": self._kid, "typ": "JWT"}
        )

    def public_jwks(self) -> list[dict[str, Any]]:
        """The public JWK of the signing key (one key: the TLS server key)."""
        return [dict(self._jwk)]

    @staticmethod
    def certificate_jwk(cert_pem: str) -> dict[str, Any] | None:
        """The public JWK of another signer's certificate (``kid``: its SHA-1 fingerprint), as
        :meth:`public_jwks` gives this one's: how a controller publishes the keys of the
        network's other controllers. None for PEM that holds no usable certificate."""
        try:
            certificates = x509.load_pem_x509_certificates(cert_pem.encode())
            key = certificates[0].public_key()
            if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
                return None
            return public_jwk(key, fingerprint(certificates[0]), certificates)
        except (ValueError, IndexError):
            return None

    def sign_detached(self, payload: bytes, kid: str) -> tuple[str, str] | None:
        """``(alg, signature)``: the JWS signature of ``payload`` (base64url, no padding) by the
        key named ``kid``, or None when no key of this signer has that ``kid``."""
        if kid != self._kid:
            return None
        signature = jwt.get_algorithm_by_name(self._algorithm).sign(payload, self._key)
        return self._algorithm, _b64url(signature)

    def verify(self, token: str, *, now: datetime | None = None, field: str = "jwt") -> dict[str, Any]:
        """The claims of a token this signer made, after checking its signature and header.

        ``exp`` is checked only when ``now`` is given (``aud``, ``nbf`` and ``iat`` never).
        Any failure raises FieldError(``field``, reason).
        """
        try:
            header = jwt.get_unverified_header(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                self._certificate.public_key(),  # type: ignore[arg-type]  # RSA or EC, like the key
                algorithms=[self._algorithm],
                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False, "verify_aud": False},
            )
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise FieldError(field, f"invalid token: {exc}") from None
        if header.get("kid") != self._kid:
            raise FieldError(field, "invalid token: unknown kid")
        if now is not None and "exp" in claims:
            exp = claims["exp"]
            if not isinstance(exp, int | float) or isinstance(exp, bool):
                raise FieldError(field, "invalid token: exp is not a NumericDate")
            if exp < as_utc(now).timestamp():
                raise FieldError(field, "invalid token: expired")
        return claims


def _conforms(signer: JwtSigner) -> ports.TokenSigner:
    """Never called: mypy proves here that :class:`JwtSigner` satisfies the port."""
    return signer
