"""Third-party certificate authorities: identities enrol and authenticate with certificates they issue.

The API layer parses ``certPem`` (it must be a CA certificate) and passes its ``fingerprint``;
a certificate already registered as a CA is refused on ``certPem`` ("certificate already used as
CA <id>", OpenZiti's ``model/ca_model.go``). A new CA is unverified and gets a verification
token. The certificate never changes after creation. Deleting a CA deletes its ``ottca``
enrolments and the certificate authenticators it issued; which certificates a CA issued is a
crypto question, answered by the ``issued_by`` callable the composition supplies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.entities.identities import Authenticator, Enrollment
from engine.entities.trust import Ca
from engine.errors import FieldError
from engine.managers._base import EntityManager, Env
from engine.ports import UnitOfWork

DEFAULT_IDENTITY_NAME_FORMAT = "[caName]-[commonName]"

#: ``issued_by(ca_cert_pem, cert_pem)``: whether the CA's key signed the certificate.
IssuedBy = Callable[[str, str], bool]


class CaManager(EntityManager[Ca]):
    kind = Ca
    immutable = frozenset({"id", "created_at", "updated_at", "cert_pem", "fingerprint", "verification_token"})

    def __init__(self, env: Env, issued_by: IssuedBy) -> None:
        super().__init__(env)
        self.issued_by = issued_by

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Ca:
        if not fields.get("cert_pem") or not fields.get("fingerprint"):
            raise FieldError("certPem", "certPem in body is required")
        now = self.env.clock.now()
        values = {k: v for k, v in fields.items() if k not in self.immutable}
        if not values.get("identity_name_format"):
            values["identity_name_format"] = DEFAULT_IDENTITY_NAME_FORMAT
        values["is_verified"] = False
        return Ca(
            id=self.env.ids.new_id(),
            created_at=now,
            updated_at=now,
            cert_pem=fields["cert_pem"],
            fingerprint=fields["fingerprint"],
            verification_token=self.env.ids.new_token(),
            **values,
        )

    def apply(self, uow: UnitOfWork, old: Ca, fields: dict[str, Any]) -> Ca:
        values = {k: v for k, v in fields.items() if k != "is_verified"}
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

    def issued_authenticators(self, uow: UnitOfWork, ca: Ca) -> list[Authenticator]:
        """The certificate authenticators whose certificate ``ca`` signed."""
        return [
            a
            for a in uow.all(Authenticator)
            if a.method == "cert"
            and a.cert_pem
            and not a.is_issued_by_network
            and self.issued_by(ca.cert_pem, a.cert_pem)
        ]

    def after_delete(self, uow: UnitOfWork, entity: Ca) -> None:
        for authenticator in self.issued_authenticators(uow, entity):
            uow.delete(Authenticator, authenticator.id)
        for enrollment in uow.all(Enrollment):
            if enrollment.ca_id == entity.id:
                uow.delete(Enrollment, enrollment.id)
