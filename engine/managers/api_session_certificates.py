"""Ephemeral API-session certificates (``/current-api-session/certificates``).

An API session opened without a certificate (password, external JWT) can ask our CA for a
short-lived client certificate from a CSR; the client keeps the key. The certificate belongs to
the session: it is listed, read and deleted through it, and goes away with it.
"""

from __future__ import annotations

from engine.entities.identities import ApiSession, ApiSessionCertificate
from engine.errors import CouldNotProcessCsrError, NotFoundError
from engine.managers._base import EntityManager, Env
from engine.managers.enrollment._core import EnrollmentSettings, sign_csr
from engine.ports import IssuedCertificate, UnitOfWork


class ApiSessionCertificateManager(EntityManager[ApiSessionCertificate]):
    kind = ApiSessionCertificate

    def __init__(self, env: Env, settings: EnrollmentSettings) -> None:
        super().__init__(env)
        self.settings = settings

    def issue(self, session: ApiSession, csr: str) -> tuple[ApiSessionCertificate, IssuedCertificate]:
        now = self.env.clock.now()
        issued = sign_csr(  # OpenZiti: 400 COULD_NOT_PROCESS_CSR, an empty CSR included
            self.env,
            csr,
            profile="client",
            common_name=session.identity_id,
            validity=self.settings.session_cert_validity,
            field="csr",
            missing=CouldNotProcessCsrError,
        )
        entity = ApiSessionCertificate(
            id=self.env.ids.new_id(),
            created_at=now,
            updated_at=now,
            api_session_id=session.id,
            identity_id=session.identity_id,
            subject=issued.info.subject,
            cert_pem=issued.pem,
            fingerprint=issued.fingerprint,
            valid_from=issued.info.not_before,
            valid_to=issued.info.not_after,
        )
        with self.env.store.write_lock():
            if self.env.store.get(ApiSession, session.id) is None:
                raise NotFoundError()
            uow = UnitOfWork(self.env.store)
            uow.put(entity)
            self.env.commit(uow)
        return entity, issued

    def of_session(self, session_id: str) -> list[ApiSessionCertificate]:
        return self.env.store.find_by(ApiSessionCertificate, "api_session_id", session_id)

    def require_of_session(self, session_id: str, id: str) -> ApiSessionCertificate:
        cert = self.get(id)
        if cert is None or cert.api_session_id != session_id:
            raise NotFoundError()
        return cert

    def delete_of_session(self, session_id: str, id: str) -> None:
        self.require_of_session(session_id, id)
        self.delete(id)
