"""Router enrollment (``erott`` edge routers, ``trott`` transit routers) and certificate extension.

A router enrolls with its one-time token and two CSRs: a client certificate (its identity toward
the controller, CN = router id) and a server certificate (its listeners, with the SANs it asks
for). Both come from our CA. The router becomes verified, its client certificate's fingerprint
identifies it from then on, and the token is consumed.

Extension (``/enroll/extend/router``) is made with the router's current, valid client
certificate and issues a new pair; the old client certificate stops identifying the router.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from engine.entities.routers import EdgeRouter, Router, RouterBase
from engine.errors import (
    EnrollmentExpiredError,
    InvalidEnrollmentTokenError,
    MissingOrInvalidCsrError,
    UnauthorizedError,
)
from engine.managers._base import Env
from engine.managers.enrollment._core import (
    EDGE_ROUTER_OTT,
    NO_ROUTER_ENROLLMENT,
    TRANSIT_ROUTER_OTT,
    EnrollmentSettings,
    check_token_format,
    leaf_of,
    sign_csr,
)
from engine.ports import UnitOfWork

KINDS: dict[str, type[RouterBase]] = {EDGE_ROUTER_OTT: EdgeRouter, TRANSIT_ROUTER_OTT: Router}


@dataclass(frozen=True)
class RouterCertificates:
    """What a router gets: its client chain, its server chain and our CA bundle (PEM)."""

    cert: str
    server_cert: str
    ca: str
    router: RouterBase


def _issue(
    env: Env, settings: EnrollmentSettings, router: RouterBase, server_csr: str | None, client_csr: str | None
) -> tuple[RouterBase, RouterCertificates]:
    now = env.clock.now()
    if not (server_csr or "").strip():
        raise MissingOrInvalidCsrError(field="serverCertCsr", reason="invalid server CSR")
    if not (client_csr or "").strip():
        raise MissingOrInvalidCsrError(field="certCsr", reason="invalid client CSR")
    server = sign_csr(
        env,
        server_csr,
        profile="server",
        common_name=router.id,
        validity=settings.server_cert_validity,
        field="serverCertCsr",
    )
    client = sign_csr(
        env,
        client_csr,
        profile="router",
        common_name=router.id,
        validity=settings.client_cert_validity,
        field="certCsr",
    )
    updated = dataclasses.replace(
        router,
        updated_at=now,
        is_verified=True,
        fingerprint=client.fingerprint,
        cert_pem=client.pem,
        **NO_ROUTER_ENROLLMENT,
    )
    certs = RouterCertificates(
        cert=client.chain_pem, server_cert=server.chain_pem, ca=env.ca.ca_bundle_pem(), router=updated
    )
    return updated, certs


def enroll(
    env: Env,
    settings: EnrollmentSettings,
    method: str,
    token: str | None,
    server_csr: str | None,
    client_csr: str | None,
) -> RouterCertificates:
    kind = KINDS[method]
    with env.store.write_lock():
        uow = UnitOfWork(env.store)
        router = uow.find_unique(kind, "enrollment_token", check_token_format(token))
        if router is None:
            raise InvalidEnrollmentTokenError()
        if router.enrollment_expires_at is None or router.enrollment_expires_at <= env.clock.now():
            raise EnrollmentExpiredError()
        updated, certs = _issue(env, settings, router, server_csr, client_csr)
        uow.put(updated)
        env.commit(uow)
        return certs


def router_by_certificate(uow: UnitOfWork, fingerprint: str) -> RouterBase | None:
    for kind in KINDS.values():
        router = uow.find_unique(kind, "fingerprint", fingerprint)
        if router is not None:
            return router
    return None


def extend(
    env: Env,
    settings: EnrollmentSettings,
    chain: Sequence[str],
    server_csr: str | None,
    client_csr: str | None,
) -> RouterCertificates:
    with env.store.write_lock():
        uow = UnitOfWork(env.store)
        leaf = leaf_of(env, list(chain), error=UnauthorizedError)
        router = router_by_certificate(uow, leaf.fingerprint)
        if router is None or not router.is_verified or not env.ca.issued_by_us(list(chain)):
            raise UnauthorizedError(reason="the certificate does not identify an enrolled router")
        updated, certs = _issue(env, settings, router, server_csr, client_csr)
        uow.put(updated)
        env.commit(uow)
        return certs
