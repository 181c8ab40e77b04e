"""Third-party certificate authorities: identities enrol and authenticate with certificates they issue.

OpenZiti's rules (``model/ca_*.go``): ``certPem`` must be a CA certificate not already registered
("certificate already used as CA <id>"); a new CA is unverified and gets a verification token;
its certificate never changes. Verification proves possession of the CA's key: a certificate
the CA signed whose common name is the verification token (a second verification is refused,
``CA_ALREADY_VERIFIED``). An unverified CA is good for nothing: no enrollment, no login.
Deleting a CA deletes its ``ottca`` enrollments and the certificate authenticators it issued, and
so ends the API sessions opened with them. ``identityRoles`` is kept as OpenZiti's store keeps a
string list (the keys of a bucket): sorted in byte order and without duplicates, as entities'
``roleAttributes`` are (``sorted_role_attributes``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from engine.entities.identities import ApiSession, Authenticator, Enrollment
from engine.entities.trust import Ca
from engine.errors import (
    CaAlreadyVerifiedError,
    CertificateFailedValidationError,
    ControllerError,
    CouldNotParseBodyError,
    CouldNotParseDerBlockError,
    ExpectedPemCertificateError,
    FieldError,
    InvalidCommonNameError,
)
from engine.managers._base import EntityManager, Env
from engine.managers.api_sessions import delete_session
from engine.managers.enrollment._core import CA, EnrollmentSettings
from engine.ports import UnitOfWork

DEFAULT_IDENTITY_NAME_FORMAT = "[caName]-[commonName]"
_PEM_TYPE = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")


def _identity_roles_as_set(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with ``identity_roles`` (when given) sorted and without duplicates."""
    roles = values.get("identity_roles")
    if roles is not None:
        values["identity_roles"] = sorted(set(roles))
    return values


class CaManager(EntityManager[Ca]):
    kind = Ca
    immutable = frozenset({"id", "created_at", "updated_at", "cert_pem", "fingerprint", "verification_token"})

    def __init__(self, env: Env, settings: EnrollmentSettings) -> None:
        super().__init__(env)
        self.settings = settings

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Ca:
        cert_pem = fields.get("cert_pem")
        if not cert_pem:
            raise FieldError("certPem", "certPem in body is required")
        cert = self.env.ca.parse_ca_certificate(cert_pem, field="certPem")
        now = self.env.clock.now()
        values = _identity_roles_as_set({k: v for k, v in fields.items() if k not in self.immutable})
        if not values.get("identity_name_format"):
            values["identity_name_format"] = DEFAULT_IDENTITY_NAME_FORMAT
        values["is_verified"] = False
        return Ca(
            id=self.env.ids.new_id(),
            created_at=now,
            updated_at=now,
            cert_pem=cert_pem,
            fingerprint=cert.fingerprint,
            verification_token=self.env.ids.new_token(),
            **values,
        )

    def apply(self, uow: UnitOfWork, old: Ca, fields: dict[str, Any]) -> Ca:
        values = _identity_roles_as_set({k: v for k, v in fields.items() if k != "is_verified"})
        claim = values.get("external_id_claim")
        if isinstance(claim, dict) and old.external_id_claim:
            # A patch sends only the claim keys it changes (a replacement sends them all).
            values["external_id_claim"] = {**old.external_id_claim, **claim}
        if "identity_name_format" in values and not values["identity_name_format"]:
            values["identity_name_format"] = DEFAULT_IDENTITY_NAME_FORMAT
        return super().apply(uow, old, values)

    def validate(self, uow: UnitOfWork, new: Ca, old: Ca | None) -> None:
        if not new.name:
            raise FieldError("name", "name in body is required")
        if old is None:
            for other in uow.all(Ca):
                if other.id != new.id and other.fingerprint == new.fingerprint:
                    raise FieldError("certPem", f"certificate already used as CA {other.id}")

    # -- verification --------------------------------------------------------------------------
    def verify(self, id: str, proof_pem: str) -> Ca:
        """Mark CA ``id`` verified after checking the proof of possession of its key."""
        with self.env.store.write_lock():
            ca = self.require(id)
            if ca.is_verified:
                raise CaAlreadyVerifiedError()
            self._check_proof(ca, proof_pem)
            verified = dataclasses.replace(ca, is_verified=True, updated_at=self.env.clock.now())
            return self.save(verified)

    def _check_proof(self, ca: Ca, proof_pem: str) -> None:
        """OpenZiti's checks, in its order and with its codes (``routes/ca_router.go``)."""
        match = _PEM_TYPE.search(proof_pem or "")
        if match is None:
            raise CouldNotParseBodyError(reason="the body must be a PEM certificate")
        if match.group(1) != "CERTIFICATE":
            raise ExpectedPemCertificateError(reason=f"encountered PEM block type {match.group(1)}")
        try:
            proof = self.env.ca.parse_certificate(proof_pem, field="certificate")
        except ControllerError as ex:
            raise CouldNotParseDerBlockError(reason=ex.reason) from None
        if proof.common_name != ca.verification_token:
            raise InvalidCommonNameError(reason="the common name must be the CA's verification token")
        # OpenZiti verifies the proof with ExtKeyUsageAny: any purpose will do
        signed = self.env.ca.issuer_index([proof.pem], [ca.cert_pem], client_auth=False) == 0
        if not signed or not proof.is_valid_at(self.env.clock.now()):
            raise CertificateFailedValidationError()

    def jwt(self, id: str) -> str:
        """The CA's enrollment JWT (``em: ca``): points a device at this controller for auto-enrollment."""
        ca = self.require(id)
        # Static (no exp), as OpenZiti's: the CA, not the JWT, decides who may enroll.
        claims = {
            "em": CA,
            "aud": ["openziti-enroller"],
            "iss": self.settings.issuer + "/",
            "sub": ca.id,
            "jti": ca.id,
        }
        return self.env.tokens.sign(claims)

    # -- deletion ------------------------------------------------------------------------------
    def issued_authenticators(self, uow: UnitOfWork, ca: Ca) -> list[Authenticator]:
        """The certificate authenticators whose certificate ``ca`` issued."""
        out: list[Authenticator] = []
        for authenticator in uow.all(Authenticator):
            if authenticator.method != "cert":
                continue
            if authenticator.ca_id == ca.id or (
                authenticator.ca_id is None
                and not authenticator.is_issued_by_network
                and authenticator.cert_pem
                and self.env.ca.issuer_index([authenticator.cert_pem], [ca.cert_pem], client_auth=False) == 0
            ):
                out.append(authenticator)
        return out

    def after_delete(self, uow: UnitOfWork, entity: Ca) -> None:
        for authenticator in self.issued_authenticators(uow, entity):
            uow.delete(Authenticator, authenticator.id)
            for session in uow.find_by(ApiSession, "identity_id", authenticator.identity_id):
                if session.authenticator_id == authenticator.id:
                    delete_session(uow, session.id)
        for enrollment in uow.all(Enrollment):
            if enrollment.ca_id == entity.id:
                uow.delete(Enrollment, enrollment.id)
        # Sessions opened with this CA's certificates, including logins by its external-id claim.
        for session in uow.find_by(ApiSession, "ca_id", entity.id):
            delete_session(uow, session.id)
