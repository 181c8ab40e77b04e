"""``/external-jwt-signers``: the standard family pattern; certificate details come from ``certPem``
(parsed through the CA port).

A ``jwksEndpoint`` on a loopback address is refused (400, field ``jwksEndpoint``) unless the
operator allows it (``TRELLIS_JWKS_ALLOW_LOOPBACK``); the engine refuses every other address the
controller must never fetch.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from api.resources import Mode, model_fields, mount, view_family
from api.routing import Routes
from api.schemas.external_jwt_signers import (
    SIGNER_NULLABLE,
    ExternalJwtSignerCreate,
    ExternalJwtSignerPatch,
    ExternalJwtSignerUpdate,
)
from api.wire import WireModel
from engine.entities.trust import ExternalJwtSigner
from engine.errors import FieldError, InvalidCertPemError
from engine.managers.external_jwt_signers import jwks_endpoint_problem
from engine.ports import CertificateAuthority


def certificate_fields(ca: CertificateAuthority, cert_pem: str | None) -> dict[str, Any]:
    """``cert_pem`` with the details derived from it (OpenZiti requires exactly one certificate)."""
    if cert_pem is None or not cert_pem.strip():
        return {
            "cert_pem": None,
            "common_name": None,
            "fingerprint": None,
            "not_before": None,
            "not_after": None,
        }
    try:
        certs = ca.parse_certificates(cert_pem, field="certPem")
    except FieldError:
        raise InvalidCertPemError(field="certPem", reason="could not parse PEM certificate") from None
    if len(certs) != 1:
        raise InvalidCertPemError(field="certPem", reason="exactly one certificate is required")
    cert = certs[0]
    return {
        "cert_pem": cert_pem,
        "common_name": cert.common_name or "",
        "fingerprint": cert.fingerprint,
        "not_before": cert.not_before,
        "not_after": cert.not_after,
    }


def signer_fields(
    model: WireModel, mode: Mode, *, ca: CertificateAuthority, allow_loopback: bool = False
) -> dict[str, Any]:
    if mode == "patch":
        fields = {k: v for k, v in model.fields_set().items() if v is not None or k in SIGNER_NULLABLE}
    else:
        fields = model_fields(model, mode, ExternalJwtSigner)
        fields.setdefault("cert_pem", None)
        fields.setdefault("jwks_endpoint", None)
    endpoint = fields.get("jwks_endpoint")
    if isinstance(endpoint, str) and endpoint.strip():
        problem = jwks_endpoint_problem(endpoint, allow_loopback=allow_loopback)
        if problem is not None:
            raise FieldError("jwksEndpoint", problem, endpoint)
    if "cert_pem" in fields:
        fields.update(certificate_fields(ca, fields["cert_pem"]))
    return fields


def register(routes: Routes) -> None:
    family = view_family(
        routes.views.external_jwt_signers,
        routes.managers.external_jwt_signers,
        create_model=ExternalJwtSignerCreate,
        update_model=ExternalJwtSignerUpdate,
        patch_model=ExternalJwtSignerPatch,
        to_fields=partial(
            signer_fields, ca=routes.ctrl.env.ca, allow_loopback=routes.ctrl.settings.jwks_allow_loopback
        ),
    )
    mount(routes, family)
