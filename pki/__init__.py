"""Trellis PKI: the controller's CA, CSR signing, certificate helpers and password hashing.

Imports only ``engine`` and the crypto libraries. Time is always passed in (``now``).

- :mod:`pki.authority`: :func:`init_pki` creates the root CA, the signing (intermediate) CA and
  the API server certificate; :class:`CertificateAuthority` signs CSRs and exposes the chain and
  the enrollment-JWT signing key.
- :mod:`pki.certs`: parsing, OpenZiti fingerprints, CA checks and verification, PKCS#7 cacerts.
- :mod:`pki.passwords`: scrypt password hashing and random passwords.
"""

from pki._x509 import PrivateKey
from pki.authority import BACKDATE, CertificateAuthority, PkiPaths, init_pki
from pki.certs import (
    certificate_pem,
    common_name,
    fingerprint,
    parse_ca_certificate,
    parse_certificate,
    parse_certificates,
    pkcs7_certs_only_b64,
    verify_ca_verification_cert,
)
from pki.passwords import ScryptPasswordHasher, generate_password

__all__ = [
    "BACKDATE",
    "CertificateAuthority",
    "PkiPaths",
    "PrivateKey",
    "ScryptPasswordHasher",
    "certificate_pem",
    "common_name",
    "fingerprint",
    "generate_password",
    "init_pki",
    "parse_ca_certificate",
    "parse_certificate",
    "parse_certificates",
    "pkcs7_certs_only_b64",
    "verify_ca_verification_cert",
]
