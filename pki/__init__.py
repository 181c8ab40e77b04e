"""Trellis PKI: the controller's CA, CSR signing, certificate helpers and password hashing.

Imports only ``engine`` and the crypto libraries. Time is always passed in (``now``).

- :mod:`pki.authority`: :func:`init_pki` creates the root CA, the signing (intermediate) CA and
  the API server certificate; :class:`CertificateAuthority` (``engine.ports.CertificateAuthority``)
  signs CSRs per profile, parses certificates into ``CertInfo`` and checks chains.
- :mod:`pki.csr`: CSRs as clients send them (PEM, base64, raw DER; mbedTLS's NULL parameters).
- :mod:`pki.certs`: parsing, OpenZiti fingerprints, CA checks and verification, PKCS#7 cacerts, and
  the check of a presented client chain (signatures, CA constraints, fitness for client auth).
- :mod:`pki.tokens`: :class:`JwtSigner` (``engine.ports.TokenSigner``), enrollment JWTs signed
  with the TLS server key.
- :mod:`pki.passwords`: password hashing (argon2id; older scrypt hashes still verify) and random
  passwords.
- :mod:`pki.totp`: :class:`PyotpTotp` (``engine.ports.TotpService``), TOTP codes and recovery codes.
- :mod:`pki.jwks`: :class:`JwksVerifier` (``engine.ports.ExternalJwtVerifier``), external JWT
  signatures checked against a certificate or a cached JWKS.
"""

from pki._x509 import PrivateKey
from pki.authority import BACKDATE, PROFILES, CertificateAuthority, PkiPaths, init_pki
from pki.certs import (
    cert_info,
    certificate_pem,
    common_name,
    fingerprint,
    parse_ca_certificate,
    parse_certificate,
    parse_certificates,
    pkcs7_certs_only_b64,
    proxied_certificates,
    verify_ca_verification_cert,
)
from pki.csr import load_csr
from pki.jwks import JwksVerifier
from pki.passwords import Argon2idPasswordHasher, ScryptPasswordHasher, generate_password
from pki.tokens import JwtSigner, jws_algorithm
from pki.totp import PyotpTotp

__all__ = [
    "BACKDATE",
    "PROFILES",
    "Argon2idPasswordHasher",
    "CertificateAuthority",
    "JwksVerifier",
    "JwtSigner",
    "PkiPaths",
    "PrivateKey",
    "PyotpTotp",
    "ScryptPasswordHasher",
    "cert_info",
    "certificate_pem",
    "common_name",
    "fingerprint",
    "generate_password",
    "init_pki",
    "jws_algorithm",
    "load_csr",
    "parse_ca_certificate",
    "parse_certificate",
    "parse_certificates",
    "pkcs7_certs_only_b64",
    "proxied_certificates",
    "verify_ca_verification_cert",
]
