"""``ott``: a one-time token and a CSR become a certificate from our CA and a cert authenticator."""

from __future__ import annotations

from engine.errors import AlreadyEnrolledError
from engine.managers._base import Env
from engine.managers.enrollment._core import (
    OTT,
    EnrollmentSettings,
    claim,
    claim_identity,
    has_cert_authenticator,
    issue_client_certificate,
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
        issued = issue_client_certificate(uow, env, settings, identity.id, csr, field="csr")
        uow.delete(type(enrollment), enrollment.id)
        env.commit(uow)
        return issued
