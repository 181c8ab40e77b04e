"""``ottca``: a one-time token plus a certificate that the enrollment's third-party CA issued.

No CSR: the certificate presented in the TLS handshake becomes the identity's cert
authenticator. The CA must be verified (OpenZiti does not ask) and allow OTT CA enrollment
(else ``ENROLLMENT_CA_NOT_VALID``), and must have issued the certificate, directly or through
intermediates the client sent, which must be valid now (else ``CERTIFICATE_FAILED_VALIDATION``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.entities.identities import Authenticator
from engine.entities.trust import Ca
from engine.errors import (
    AlreadyEnrolledError,
    CertificateFailedValidationError,
    EnrollmentCaNotValidError,
    InvalidEnrollmentTokenError,
)
from engine.managers._base import Env
from engine.managers.enrollment._core import (
    OTTCA,
    cert_authenticator,
    check_cert_unused,
    claim,
    claim_identity,
    has_cert_authenticator,
    issuing_ca,
    leaf_of,
)
from engine.ports import UnitOfWork


def enroll(env: Env, token: str | None, chain: Sequence[str]) -> Authenticator:
    """OpenZiti's checks in its order (``enrollment_mod_ottca.go``): the token, the CA, the
    certificate (present, valid now, issued by the CA), then that no one else uses it."""
    with env.store.write_lock():
        uow = UnitOfWork(env.store)
        enrollment = claim(uow, env, token, OTTCA)
        identity = claim_identity(uow, enrollment)
        if has_cert_authenticator(uow, identity.id):
            raise AlreadyEnrolledError()
        ca = uow.get(Ca, enrollment.ca_id) if enrollment.ca_id else None
        if ca is None:  # the CA went away (its deletion takes its enrollments with it)
            raise InvalidEnrollmentTokenError()
        if not ca.is_verified or not ca.is_ott_ca_enrollment_enabled:
            raise EnrollmentCaNotValidError(
                reason="the enrollment's CA is not verified or does not allow OTT CA enrollment"
            )
        presented = list(chain)
        leaf = leaf_of(env, presented, error=CertificateFailedValidationError)
        if issuing_ca(env, presented, [ca]) is None:
            raise CertificateFailedValidationError(
                reason="the certificate was not issued by the enrollment's CA"
            )
        check_cert_unused(uow, leaf.fingerprint)
        authenticator = cert_authenticator(env, identity.id, leaf, issued_by_network=False, ca_id=ca.id)
        uow.put(authenticator)
        uow.delete(type(enrollment), enrollment.id)
        env.commit(uow)
        return authenticator
