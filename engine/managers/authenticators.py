"""Authenticators: the username/password (``updb``) and certificate (``cert``) credentials.

OpenZiti's rules (``controller/model/authenticator_manager.go``, ``db/authenticator_store.go``):
``method`` is ``updb`` or ``cert``; an identity holds at most one authenticator per method
(409 ``MAX_AUTHENTICATOR_METHODS_REACHED``); router identities get none; usernames and certificate
fingerprints are unique. Passwords are stored only as hashes. Deleting an authenticator ends the
API sessions that were opened with it.

Certificates are parsed through the CA port. A certificate authenticator issued by our CA can
be extended: an administrator may ask for it (``request-extend``), the identity sends a CSR
(``extend``, over mutual TLS with the current certificate) and gets a new one, which
authenticates only once confirmed (``extend-verify``); that retires the old one. Any authenticator can be reverted to an
enrollment (``re-enroll``): ``updb`` becomes a ``updb`` enrollment for the same username, a
network-issued certificate an ``ott`` one, a third-party certificate an ``ottca`` one.

Every password set here (create, replace, patch, and the identity's own change with its current
password) must satisfy the identity's auth policy (``primary.updb``), and a changed password ends
the identity's API sessions (all of them after an administrator's change; all but the caller's
own after the identity's own change, as an identity keeps the session it changed it from).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engine.entities.identities import ApiSession, Authenticator, Enrollment, Identity
from engine.entities.trust import Ca
from engine.errors import (
    AuthenticatorCanNotBeUpdatedError,
    AuthenticatorMethodMaxError,
    ControllerError,
    EnrollmentExistsError,
    FieldError,
    InvalidClientCertError,
    NotFoundError,
    UnauthorizedError,
)
from engine.logs import event
from engine.managers._base import EntityManager
from engine.managers.api_sessions import delete_session, end_identity_sessions
from engine.managers.auth_policies import check_password as check_password_rules
from engine.managers.auth_policies import rules_for
from engine.managers.authentication._core import LoginAttempt
from engine.managers.authentication.password import check_password
from engine.managers.enrollment._core import (
    OTT,
    OTTCA,
    UPDB,
    EnrollmentSettings,
    issuing_ca,
    new_identity_enrollment,
    sign_csr,
)
from engine.managers.usernames import check_username
from engine.ports import IssuedCertificate, UnitOfWork

log = logging.getLogger(__name__)

METHODS = ("updb", "cert")
ROUTER_TYPE = "Router"

USERNAME_MIN, USERNAME_MAX = 4, 100
PASSWORD_MIN, PASSWORD_MAX = 5, 100


def check_length(field: str, value: str | None, low: int, high: int) -> None:
    if value is None or value == "":
        raise FieldError(field, f"{field} is required", value)
    if len(value) < low:
        raise FieldError(field, f"{field} should be at least {low} chars long", _masked(field, value))
    if len(value) > high:
        raise FieldError(field, f"{field} should be at most {high} chars long", _masked(field, value))


def _masked(field: str, value: str) -> str:
    return "******" if field == "password" else value


class AuthenticatorManager(EntityManager[Authenticator]):
    kind = Authenticator
    immutable = frozenset({"id", "created_at", "updated_at", "identity_id", "method", "password_hash"})

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Authenticator:
        method = fields.get("method") or ""
        if method not in METHODS:
            raise FieldError("method", "method must be updb or cert", method)
        identity_id = fields.get("identity_id") or ""
        now = self.env.clock.now()
        authenticator = Authenticator(
            id=self.env.ids.new_id(),
            created_at=now,
            updated_at=now,
            tags=dict(fields.get("tags") or {}),
            identity_id=identity_id,
            method=method,
        )
        if method == "updb":
            username, password = fields.get("username"), fields.get("password")
            check_length("username", username, USERNAME_MIN, USERNAME_MAX)
            check_length("password", password, PASSWORD_MIN, PASSWORD_MAX)
            assert password is not None
            self._check_policy(uow, identity_id, password)
            return dataclasses.replace(
                authenticator, username=username, password_hash=self.env.hasher.hash(password)
            )
        cert_pem = fields.get("cert_pem")
        if not cert_pem:
            raise FieldError("certPem", "certPem is required", cert_pem)
        certs = self.env.ca.parse_certificates(cert_pem, field="certPem")
        if len(certs) != 1:
            raise FieldError("certPem", "client pem must be exactly one certificate")
        return dataclasses.replace(
            authenticator,
            cert_pem=certs[0].pem,
            fingerprint=certs[0].fingerprint,
            is_issued_by_network=self.env.ca.issued_by_us([cert_pem], client_auth=False),
        )

    def apply(self, uow: UnitOfWork, old: Authenticator, fields: dict[str, Any]) -> Authenticator:
        changes = {k: v for k, v in fields.items() if k not in self.immutable}
        password = changes.pop("password", None)
        credential_change = password is not None or "username" in changes
        if credential_change and old.method != "updb":
            raise AuthenticatorCanNotBeUpdatedError()
        if "username" in changes:
            check_length("username", changes["username"], USERNAME_MIN, USERNAME_MAX)
        if password is not None:
            check_length("password", password, PASSWORD_MIN, PASSWORD_MAX)
            self._check_policy(uow, old.identity_id, password)
            changes["password_hash"] = self.env.hasher.hash(password)
        return dataclasses.replace(old, updated_at=self.env.clock.now(), **changes)

    def _check_policy(self, uow: UnitOfWork, identity_id: str, password: str) -> None:
        identity = uow.get(Identity, identity_id) if identity_id else None
        if identity is not None:
            check_password_rules(rules_for(uow, identity).updb, password)

    def after_update(self, uow: UnitOfWork, old: Authenticator, new: Authenticator) -> None:
        if new.password_hash != old.password_hash:
            end_identity_sessions(uow, new.identity_id)

    def update_own(
        self,
        identity_id: str,
        id: str,
        current_password: str,
        fields: dict[str, Any],
        *,
        keep_session: str | None = None,
    ) -> Authenticator:
        """The identity changes its own ``updb`` credentials, proving the current password.

        404 for an authenticator that is not the identity's, 409 ``CAN_NOT_UPDATE_AUTHENTICATOR``
        for a certificate, 401 for a wrong current password (OpenZiti's ``UpdateSelf``). A new
        password ends the identity's other API sessions; ``keep_session`` (the caller's) stays.
        """
        checked = self.require_own(identity_id, id)
        if checked.method != "updb":
            raise AuthenticatorCanNotBeUpdatedError(reason="only updb authenticators have a password")
        identity = self.env.store.get(Identity, identity_id)
        # Counted against the auth policy's lockout like a login's password, and checked before
        # the write lock is taken (a password hash is slow; writers must not wait for it).
        note = LoginAttempt("password")
        if identity is None or not check_password(self.env, checked, identity, current_password, login=note):
            event(
                log,
                logging.WARNING,
                "password.change_refused",
                identity_id=identity_id,
                identity_name=identity.name if identity is not None else None,
                authenticator_id=id,
                reason=note.reason or "no such identity",
            )
            raise UnauthorizedError(field="currentPassword", reason="invalid current password")
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            old = self.require_own(identity_id, id)
            if old.password_hash != checked.password_hash:  # changed meanwhile: prove the new one
                raise UnauthorizedError(field="currentPassword", reason="invalid current password")
            new = self.apply(uow, old, fields)
            self.validate(uow, new, old)
            self.check_unique(uow, new)
            uow.put(new)
            if new.password_hash != old.password_hash:
                end_identity_sessions(uow, identity_id, keep=keep_session)
            self.env.commit(uow)
            return new

    def validate(self, uow: UnitOfWork, new: Authenticator, old: Authenticator | None) -> None:
        if new.username is not None and (old is None or new.username != old.username):
            check_username(uow, new.username, new.id)
        if old is not None:
            return
        identity = uow.get(Identity, new.identity_id) if new.identity_id else None
        if identity is None:
            raise FieldError("identityId", "identity not found", new.identity_id)
        if identity.type_id == ROUTER_TYPE:
            raise FieldError("identityId", "may not create authenticators for router identities", identity.id)
        for existing in uow.find_by(Authenticator, "identity_id", identity.id):
            if existing.method == new.method:
                raise AuthenticatorMethodMaxError()

    def after_delete(self, uow: UnitOfWork, entity: Authenticator) -> None:
        for session in uow.find_by(ApiSession, "identity_id", entity.identity_id):
            if session.authenticator_id == entity.id:
                delete_session(uow, session.id)

    def for_identity(self, identity_id: str) -> list[Authenticator]:
        return self.env.store.find_by(Authenticator, "identity_id", identity_id)

    def require_own(self, identity_id: str, id: str) -> Authenticator:
        """Authenticator ``id`` of ``identity_id``; someone else's is 404 too (OpenZiti's
        ``ReadForIdentity``), so ids of other identities' authenticators are not disclosed."""
        authenticator = self.get(id)
        if authenticator is None or authenticator.identity_id != identity_id:
            raise NotFoundError()
        return authenticator

    # -- re-enrollment -------------------------------------------------------------------------
    def re_enroll(self, id: str, expires_at: datetime, settings: EnrollmentSettings) -> Enrollment:
        """Replace authenticator ``id`` by an enrollment of the matching method (201 on the wire)."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            old = self.require(id)
            if expires_at <= self.env.clock.now():
                raise FieldError(
                    "expiresAt", "must be after the current date and time", expires_at.isoformat()
                )
            if old.method == "updb":
                method, ca_id, username = UPDB, None, old.username
            elif (ca := self._issuing_ca(uow, old)) is not None:
                method, ca_id, username = OTTCA, ca.id, None
            else:
                method, ca_id, username = OTT, None, None
            for existing in uow.find_by(Enrollment, "identity_id", old.identity_id):
                if existing.method == method:
                    raise EnrollmentExistsError(
                        field="method", value=method, reason="enrollment of same method exists"
                    )
            enrollment = new_identity_enrollment(
                self.env,
                settings,
                identity_id=old.identity_id,
                method=method,
                expires_at=expires_at,
                ca_id=ca_id,
                username=username,
            )
            uow.delete(Authenticator, old.id)
            self.after_delete(uow, old)
            uow.put(enrollment)
            self.env.commit(uow)
            return enrollment

    def _issuing_ca(self, uow: UnitOfWork, authenticator: Authenticator) -> Ca | None:
        """The third-party CA that issued a cert authenticator's certificate, verified or not.

        The one recorded at enrollment, else the first CA whose certificate signed it (as
        OpenZiti's ``getCaId``, which looks at every CA); None for ours and for unknown issuers.
        """
        if authenticator.method != "cert" or authenticator.is_issued_by_network:
            return None
        if authenticator.ca_id is not None and (recorded := uow.get(Ca, authenticator.ca_id)) is not None:
            return recorded
        if not authenticator.cert_pem:
            return None
        return issuing_ca(self.env, [authenticator.cert_pem], uow.all(Ca), client_auth=False)

    # -- certificate extension -----------------------------------------------------------------
    def request_extend(self, id: str, *, roll_keys: bool) -> Authenticator:
        """Ask the identity to extend (and with ``roll_keys`` re-key) its certificate at its next login."""
        with self.env.store.write_lock():
            old = self.require(id)
            if old.method != "cert":
                raise UnauthorizedError(reason="authenticator is not a certificate authenticator")
            now = self.env.clock.now()
            new = dataclasses.replace(
                old,
                updated_at=now,
                is_extend_requested=True,
                is_key_roll_requested=roll_keys,
                extend_requested_at=now,
            )
            return self.save(new)

    def extend(
        self,
        identity_id: str,
        id: str,
        csr: str | None,
        presented: Sequence[str],
        settings: EnrollmentSettings,
    ) -> IssuedCertificate:
        """Issue a new certificate for the authenticator; the old one works until ``extend_verify``.

        Made over mutual TLS with the authenticator's current certificate (``presented``, leaf
        first), which must be the one on record and issued by our CA.
        """
        if not presented:  # checked first, as OpenZiti's router does
            raise UnauthorizedError(reason="the current client certificate is required")
        with self.env.store.write_lock():
            old = self._require_cert_of(identity_id, id)
            if not old.is_issued_by_network or not old.cert_pem:
                raise AuthenticatorCanNotBeUpdatedError(
                    reason="only certificates issued by this controller can be extended"
                )
            try:
                current = self.env.ca.parse_certificate(presented[0], field="clientCert")
            except ControllerError:
                raise UnauthorizedError(reason="the client certificate could not be parsed") from None
            if current.fingerprint != old.fingerprint or not self.env.ca.issued_by_us(list(presented)):
                raise UnauthorizedError(reason="the client certificate is not the authenticator's")
            issued = sign_csr(
                self.env,
                csr,
                profile="client",
                common_name=old.identity_id,
                validity=settings.client_cert_validity,
                field="clientCertCsr",
            )
            new = dataclasses.replace(
                old,
                updated_at=self.env.clock.now(),
                unverified_cert_pem=issued.pem,
                unverified_fingerprint=issued.fingerprint,
            )
            self.save(new)
            return issued

    def extend_verify(self, identity_id: str, id: str, cert_pem: str) -> Authenticator:
        """Confirm the extended certificate: it becomes the authenticator's, the old one is retired."""
        with self.env.store.write_lock():
            old = self._require_cert_of(identity_id, id)
            if not old.cert_pem or not old.unverified_cert_pem or not old.unverified_fingerprint:
                raise AuthenticatorCanNotBeUpdatedError(reason="no extended certificate awaits verification")
            try:
                cert = self.env.ca.parse_certificate(cert_pem, field="clientCert")
            except ControllerError:
                raise InvalidClientCertError(
                    field="clientCert", reason="could not parse PEM certificate"
                ) from None
            if cert.fingerprint != old.unverified_fingerprint:
                raise InvalidClientCertError(
                    field="clientCert", reason="the certificate is not the one issued by extend"
                )
            previous = self.env.ca.parse_certificate(old.cert_pem, field="certPem")
            key_changed = previous.public_key_id != cert.public_key_id
            new = dataclasses.replace(
                old,
                updated_at=self.env.clock.now(),
                cert_pem=old.unverified_cert_pem,
                fingerprint=old.unverified_fingerprint,
                unverified_cert_pem=None,
                unverified_fingerprint=None,
                is_extend_requested=False,
                is_key_roll_requested=False,
                last_extend_rolled_keys=key_changed,
            )
            return self.save(new)

    def _require_cert_of(self, identity_id: str, id: str) -> Authenticator:
        """Cert authenticator ``id`` of ``identity_id``: 404 unknown, 409 not cert, 401 someone else's."""
        authenticator = self.require(id)
        if authenticator.method != "cert":
            raise AuthenticatorCanNotBeUpdatedError(
                reason="the authenticator is not a certificate authenticator"
            )
        if authenticator.identity_id != identity_id:
            raise UnauthorizedError()
        return authenticator
