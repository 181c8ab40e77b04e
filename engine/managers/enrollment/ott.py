"""``ott``: a one-time token and a CSR become a certificate from our CA and a cert authenticator."""

from __future__ import annotations

from engine.errors import AlreadyEnrolledError
from engine.managers._base import Env
from engine.managers.enrollment._core import (
    OTT,
    EnrollmentSettings,
    cert_authenticator,
    check_cert_unused,
    claim,
    claim_identity,
    has_cert_authenticator,
    sign_csr,
)
from engine.ports import IssuedCertificate, UnitOfWork


def enroll(env: Env, settings: EnrollmentSettings, token: str | None, csr: str | None) -> IssuedCertificate:
    """Sign ``csr`` for the identity behind ``token`` (CN = identity id) and consume the token."""
    with env.store.write_lock():
        uow = UnitOfWork(env.store)
        enrollment = claim(uow, env, token, OTT)
        identity = claim_identity(uow, enrollment)
        if has_cert_authenticator(uow, identity.id):
            raise AlreadyEnrolledError()
        issued = sign_csr(
            env,
            csr,
            profile="client",
            common_name=identity.id,
            validity=settings.client_cert_validity,
            field="csr",
        )
        check_cert_unused(uow, issued.fingerprint)
        uow.put(cert_authenticator(env, identity.id, issued.info, issued_by_network=True))
        uow.delete(type(enrollment), enrollment.id)
        env.commit(uow)
        return issued
