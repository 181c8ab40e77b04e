"""``method=cert``: the client certificate of the TLS handshake (or a trusted proxy's header).

OpenZiti's rules (``model/authenticator_mod_cert.go``), every refusal ``INVALID_AUTH``:

- the chain must lead to a CA we trust for login, checked on every login (the TLS layer's trust
  can lag a CA's deletion on kept-alive connections): our CA, or a verified third-party CA with
  ``isAuthEnabled``;
- a third-party CA with an ``externalIdClaim`` names the identity by the claim's value (its
  ``externalId``); otherwise the leaf's fingerprint names a cert authenticator. The new
  certificate of an extension counts only after ``extend-verify``;
- expired (or not yet valid) certificates only where the identity's auth policy sets
  ``primary.cert.allowExpiredCerts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.entities.identities import Authenticator, Identity
from engine.entities.trust import Ca
from engine.errors import ControllerError, InvalidAuthError
from engine.managers._base import Env
from engine.managers.auth_policies import rules_for
from engine.managers.authentication._core import LoginAttempt
from engine.managers.enrollment._core import issuing_ca, usable_cas
from engine.managers.enrollment.ca import external_id
from engine.ports import CertInfo

#: The authenticator id reported for a login resolved by a CA's external-id claim.
EXTERNAL_ID_AUTHENTICATOR = "internal"


@dataclass(frozen=True)
class CertProof:
    identity: Identity
    #: The cert authenticator, or a stand-in for an external-id login (id ``internal``).
    authenticator: Authenticator
    leaf: CertInfo
    #: The third-party CA that issued the certificate (None for our own).
    ca: Ca | None = None


class CertCheck:
    def __init__(self, env: Env) -> None:
        self.env = env

    def prove(self, chain: Sequence[str], attempt: LoginAttempt | None = None) -> CertProof:
        """Who ``chain`` (leaf first, PEM) proves the caller is, or ``INVALID_AUTH`` (``attempt``
        learns who it was for and why it was refused)."""
        note = attempt if attempt is not None else LoginAttempt("cert")
        if not chain:
            raise InvalidAuthError(reason="a client certificate is required")
        try:
            leaf = self.env.ca.parse_certificate(chain[0], field="clientCert")
        except ControllerError:
            raise InvalidAuthError(reason="the client certificate could not be parsed") from None
        chain = list(chain)
        # OpenZiti's login verifies with ExtKeyUsageAny: a certificate for any purpose logs in
        ours = self.env.ca.issued_by_us(chain, client_auth=False)
        cas = usable_cas(self.env.store, "is_auth_enabled")
        ca = None if ours else issuing_ca(self.env, chain, cas, client_auth=False)
        if not ours and ca is None:
            raise InvalidAuthError(reason="the certificate is not issued by a trusted CA")
        identity, authenticator = self._resolve(leaf, ca, note)
        note.identity = identity
        expired = not leaf.is_valid_at(self.env.clock.now())
        if expired and not rules_for(self.env.store, identity).cert.allow_expired_certs:
            raise InvalidAuthError(reason="the client certificate is expired or not yet valid")
        return CertProof(identity=identity, authenticator=authenticator, leaf=leaf, ca=ca)

    def _resolve(self, leaf: CertInfo, ca: Ca | None, note: LoginAttempt) -> tuple[Identity, Authenticator]:
        store = self.env.store
        if ca is not None and ca.external_id_claim:
            try:
                value = external_id(ca, leaf)
            except ControllerError:
                value = None
            identity = store.find_unique(Identity, "external_id", value) if value else None
            if identity is None:
                note.refuse(f"the external id of CA {ca.id}'s certificate names no identity")
                raise InvalidAuthError()
            stand_in = Authenticator(
                id=EXTERNAL_ID_AUTHENTICATOR,
                created_at=identity.created_at,
                updated_at=identity.updated_at,
                identity_id=identity.id,
                method="cert",
                cert_pem=leaf.pem,
                fingerprint=leaf.fingerprint,
                ca_id=ca.id,
            )
            return identity, stand_in
        authenticator = store.find_unique(Authenticator, "fingerprint", leaf.fingerprint)
        if authenticator is None and self.env.store.catch_up():  # enrolled on another process just now
            authenticator = store.find_unique(Authenticator, "fingerprint", leaf.fingerprint)
        if authenticator is None or authenticator.method != "cert":
            note.refuse("no authenticator has the certificate")
            raise InvalidAuthError()
        identity = store.get(Identity, authenticator.identity_id)
        if ca is not None and authenticator.ca_id not in (None, ca.id):
            note.refuse("the certificate's authenticator is of another CA", identity)
            raise InvalidAuthError()
        if identity is None:
            note.refuse("the authenticator's identity does not exist")
            raise InvalidAuthError()
        return identity, authenticator
