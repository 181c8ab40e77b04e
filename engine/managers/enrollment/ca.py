"""CA auto-enrollment: a certificate from a verified third-party CA creates its own identity.

The client presents, in the TLS handshake, a certificate issued by a CA that is verified and has
``isAutoCaEnrollmentEnabled``. The new identity is named by the CA's ``identityNameFormat``
(placeholders ``[caName]``, ``[caId]``, ``[commonName]``, ``[requestedName]``,
``[identityId]``; a name already taken gets a numeric suffix), carries the CA's
``identityRoles`` as role attributes, and gets a cert authenticator for the presented
certificate. When the CA has an ``externalIdClaim``, the identity instead takes its
``externalId`` from the certificate and gets no authenticator: it logs in with any certificate
of that CA carrying the same claim (OpenZiti's behaviour).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from engine.entities.identities import Identity
from engine.entities.trust import Ca
from engine.errors import (
    CertFailedValidationError,
    CertInUseError,
    EnrollmentNoValidCasError,
    MissingCertClaimError,
)
from engine.managers._base import Env
from engine.managers.enrollment._core import (
    cert_authenticator,
    check_cert_unused,
    issuing_ca,
    leaf_of,
    usable_cas,
)
from engine.ports import CertInfo, UnitOfWork

DEFAULT_NAME_FORMAT = "[caName]-[commonName]"
_MAX_SUFFIX = 1_000_000


_PLACEHOLDER = re.compile(r"\[(caName|caId|commonName|requestedName|identityId)\]")


def format_name(name_format: str, *, ca: Ca, leaf: CertInfo, requested: str, identity_id: str) -> str:
    """``name_format`` with its placeholders replaced in one pass, so that a value that itself looks
    like a placeholder (a certificate's CN ``[identityId]``) stays as it is. An empty requested
    name is the new identity's id (OpenZiti's rule); unknown ``[x]`` stay literal."""
    values = {
        "caName": ca.name,
        "caId": ca.id,
        "commonName": leaf.common_name or "",
        "requestedName": requested or identity_id,
        "identityId": identity_id,
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], name_format or DEFAULT_NAME_FORMAT)


def claim_values(claim: dict[str, Any], leaf: CertInfo) -> list[str]:
    """The values an ``externalIdClaim`` selects from a certificate, in order (``x509-claims``):
    PREFIX and SUFFIX keep the values with that prefix or suffix and strip it, SCHEME keeps the
    URIs of that scheme, SPLIT splits each value on ``parserCriteria``."""
    location = str(claim.get("location") or "COMMON_NAME").upper()
    if location == "SAN_URI":
        values = list(leaf.uris)
    elif location == "SAN_EMAIL":
        values = list(leaf.emails)
    else:
        values = [leaf.common_name] if leaf.common_name else []
    matcher = str(claim.get("matcher") or "ALL").upper()
    criteria = str(claim.get("matcherCriteria") or "")
    if matcher == "PREFIX":
        values = [v[len(criteria) :] for v in values if v.startswith(criteria)]
    elif matcher == "SUFFIX":
        values = [v[: len(v) - len(criteria)] for v in values if v.endswith(criteria)]
    elif matcher == "SCHEME":
        values = [v for v in values if v.partition(":")[0].lower() == criteria.lower()]
    parser = str(claim.get("parser") or "NONE").upper()
    separator = str(claim.get("parserCriteria") or "")
    if parser == "SPLIT" and separator:
        values = [part for v in values for part in v.split(separator)]
    return values


def external_id(ca: Ca, leaf: CertInfo) -> str | None:
    claim = ca.external_id_claim
    if not claim:
        return None
    values = claim_values(claim, leaf)
    index = int(claim.get("index") or 0)
    if not 0 <= index < len(values) or not values[index]:
        raise MissingCertClaimError()
    return values[index]


def _unique_name(uow: UnitOfWork, name: str) -> str:
    def taken(candidate: str) -> bool:
        return uow.find_unique(Identity, "name", candidate) is not None

    if not taken(name):
        return name
    # OpenZiti appends the counter to the previous candidate (X000001000002); we count on the base.
    for n in range(1, _MAX_SUFFIX):
        candidate = f"{name}{n:06d}"
        if not taken(candidate):
            return candidate
    raise EnrollmentNoValidCasError(reason="no free identity name")


def enroll(env: Env, chain: Sequence[str], requested_name: str | None) -> Identity:
    with env.store.write_lock():
        uow = UnitOfWork(env.store)
        cas = usable_cas(uow, "is_auto_ca_enrollment_enabled")
        if not cas:
            raise EnrollmentNoValidCasError()
        leaf = leaf_of(env, list(chain))
        ca = issuing_ca(env, chain, cas)
        if ca is None:
            raise CertFailedValidationError(
                reason="the certificate was not issued by a CA that allows auto enrollment"
            )
        identity_id = env.ids.new_id()
        name = format_name(
            ca.identity_name_format, ca=ca, leaf=leaf, requested=requested_name or "", identity_id=identity_id
        )
        ext_id = external_id(ca, leaf)
        if ext_id is not None:
            if uow.find_unique(Identity, "external_id", ext_id) is not None:
                raise CertInUseError(reason="the certificate's external id belongs to another identity")
        else:
            check_cert_unused(uow, leaf.fingerprint)
        now = env.clock.now()
        identity = Identity(
            id=identity_id,
            created_at=now,
            updated_at=now,
            # A format that came out empty (``[commonName]`` of a certificate without one): the id.
            name=_unique_name(uow, name if name.strip() else identity_id),
            role_attributes=sorted(set(ca.identity_roles)),
            external_id=ext_id,
        )
        uow.put(identity)
        if ext_id is None:
            uow.put(cert_authenticator(env, identity.id, leaf, issued_by_network=False, ca_id=ca.id))
        env.commit(uow)
        return identity
