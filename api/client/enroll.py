"""``/enroll*`` (client API, no session): every enrollment method, the legacy and the typed routes.

``POST /enroll?method=&token=`` is what SDKs call (wire-contract §6.3): a ``text/plain``,
``application/x-pem-file`` or ``application/pkcs7`` body is a PEM CSR (the legacy path; also an
empty body for ``method=ca``); a JSON body is OpenZiti's ``genericEnroll``. Without ``method``
the token's own method is used; a ``method`` that is not the token's is refused
(``INVALID_ENROLL_METHOD``). The typed routes (``/enroll/ott``, ``/ottca``, ``/ca``,
``/updb``, ``/erott``, ``/extend/router``, ``/token``) take the spec's bodies.

``POST /enroll/token`` enrolls with an external identity provider's JWT, sent as
``Authorization: Bearer`` (the optional ``ziti-token-issuer-id`` header names the signer to check
it with). A ``{"clientCsr"}`` body asks for a certificate: ``{"data": {"cert", "ca"}}``; without
one the identity logs in with that provider's tokens: ``{"data": {}}``.

An ``ott`` enrollment answers the certificate chain as JSON ``{"data": {"cert": ...}}`` or as
PEM (``application/x-pem-file``), as the client's ``Accept`` prefers, on every route (OpenZiti's
legacy path answers only JSON and refuses ``Accept: application/x-pem-file`` with 415); other
methods answer JSON. The answer's format is settled before the token is spent, so a client
refused with 415 can try again.
"""

from __future__ import annotations

import falcon

from api.http import empty, ok, read_body, read_model
from api.middleware import NONE, bearer_tokens
from api.peer import presented_chain
from api.routing import Routes
from api.schemas.enroll import (
    EnrollCa,
    EnrollErott,
    EnrollOtt,
    EnrollOttCa,
    EnrollUpdb,
    GenericEnroll,
    RouterExtend,
)
from api.wire import WireModel
from engine.errors import UnsupportedMediaError
from engine.managers.enrollment import (
    CA,
    EDGE_ROUTER_OTT,
    OTT,
    OTTCA,
    UPDB,
    EnrollManager,
    RouterCertificates,
)
from engine.ports import IssuedCertificate

#: The header naming the external JWT signer a token enrollment's bearer token is checked with.
TOKEN_ISSUER_HEADER = "ziti-token-issuer-id"

#: Media types whose body is a PEM CSR (OpenZiti's legacy enrollment path).
LEGACY_TYPES = ("application/pkcs7", "application/x-pem-file", "text/plain")
PEM_TYPE = "application/x-pem-file"
_JSON_ACCEPTS = ("application/json", "*/*", "application/*")
_PEM_ACCEPTS = (PEM_TYPE, "application/pkix-cert", "application/x-x509-user-cert", "text/plain")


def _accepts(req: falcon.Request) -> list[tuple[str, float]]:
    """The ``Accept`` media ranges the client takes (q > 0) with their q-values, most preferred first."""
    header = req.get_header("Accept")
    if not header:
        return [("*/*", 1.0)]
    ranges: list[tuple[str, float]] = []
    for item in header.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media and q > 0:
            ranges.append((media.lower(), q))
    return sorted(ranges, key=lambda r: -r[1])


def certificate_format(req: falcon.Request) -> str:
    """``json`` or ``pem`` for an ott answer; 415 when the client accepts neither.

    JSON whenever the client accepts it at all, whatever it prefers (so every request OpenZiti
    answers gets OpenZiti's JSON); PEM only for a client that accepts PEM and not JSON.
    """
    accepted = [media for media, _ in _accepts(req)]
    if any(media in _JSON_ACCEPTS for media in accepted):
        return "json"
    if any(media in _PEM_ACCEPTS or media == "text/*" for media in accepted):
        return "pem"
    raise UnsupportedMediaError(
        reason="No suitable accept media types were detected, supports: application/json"
    )


def require_json_accepted(req: falcon.Request) -> None:
    if not any(media in _JSON_ACCEPTS for media, _ in _accepts(req)):
        raise UnsupportedMediaError(
            reason="No suitable accept media types were detected, supports: application/json"
        )


def answer_certificate(resp: falcon.Response, issued: IssuedCertificate, fmt: str) -> None:
    """The chain of an ``ott`` enrollment in ``fmt`` (:func:`certificate_format`, decided before
    enrolling)."""
    if fmt == "pem":
        resp.content_type = PEM_TYPE
        resp.text = issued.chain_pem
        return
    ok(resp, {"cert": issued.chain_pem})


def answer_router(resp: falcon.Response, certs: RouterCertificates) -> None:
    ok(resp, {"ca": certs.ca, "cert": certs.cert, "serverCert": certs.server_cert})


class TokenEnrollmentRequest(WireModel):
    """``tokenEnrollmentRequest``: a CSR asks for a certificate; none, for token logins."""

    client_csr: str | None = None


def _media_type(req: falcon.Request) -> str:
    return (req.content_type or "").split(";")[0].strip().lower()


class EnrollResource:
    """``POST /enroll``: the method-dispatching enrollment SDKs and routers use."""

    auth = NONE
    body_models = {"post": GenericEnroll}

    def __init__(self, enroll: EnrollManager) -> None:
        self.enroll = enroll

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        token = req.get_param("token")
        asked = req.get_param("method")
        method = asked if asked == CA else self.enroll.method_of(token, asked)
        media = _media_type(req)
        if media in LEGACY_TYPES or (not media and method == CA):
            self._legacy(req, resp, method, token)
        else:
            self._generic(req, resp, method, token)

    def _legacy(self, req: falcon.Request, resp: falcon.Response, method: str, token: str | None) -> None:
        fmt = certificate_format(req) if method == OTT else "json"
        if method != OTT:
            require_json_accepted(req)
        body = read_body(req, req.context.max_body_bytes).decode("utf-8", "replace")
        chain = presented_chain(req)
        if method == OTT:
            answer_certificate(resp, self.enroll.ott(token, body), fmt)
        elif method == OTTCA:
            self.enroll.ottca(token, chain)
            empty(resp)
        elif method == CA:
            self.enroll.ca(chain, None)
            empty(resp)
        elif method == UPDB:
            self.enroll.updb(token, None, None)
            empty(resp)
        else:  # routers send JSON; a PEM body carries one CSR where two are needed
            answer_router(resp, self.enroll.router(method, token, None, body))

    def _generic(self, req: falcon.Request, resp: falcon.Response, method: str, token: str | None) -> None:
        model = read_model(req, GenericEnroll, allow_empty=method == CA)
        chain = presented_chain(req)
        if method == OTT:
            fmt = certificate_format(req)
            answer_certificate(resp, self.enroll.ott(token, model.client_csr), fmt)
        elif method == OTTCA:
            self.enroll.ottca(token, chain)
            empty(resp)
        elif method == CA:
            self.enroll.ca(chain, model.name)
            empty(resp)
        elif method == UPDB:
            self.enroll.updb(token, model.username, model.password)
            empty(resp)
        else:
            client_csr = model.cert_csr or model.client_csr
            answer_router(resp, self.enroll.router(method, token, model.server_cert_csr, client_csr))


class TypedEnrollResource:
    """The spec's typed enrollment routes, one responder per method."""

    auth = NONE
    body_models = {
        "post_ott": EnrollOtt,
        "post_ottca": EnrollOttCa,
        "post_ca": EnrollCa,
        "post_updb": EnrollUpdb,
        "post_erott": EnrollErott,
        "post_extend_router": RouterExtend,
        "post_token": TokenEnrollmentRequest,
    }

    def __init__(self, enroll: EnrollManager) -> None:
        self.enroll = enroll

    def on_post_ott(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll an identity with a one-time token and a CSR."""
        model = read_model(req, EnrollOtt)
        fmt = certificate_format(req)
        answer_certificate(resp, self.enroll.ott(model.token, model.client_csr), fmt)

    def on_post_ottca(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll an identity with a one-time token and a certificate from the enrollment's CA."""
        model = read_model(req, EnrollOttCa)
        self.enroll.ottca(model.token, presented_chain(req))
        empty(resp)

    def on_post_ca(self, req: falcon.Request, resp: falcon.Response) -> None:
        """CA auto-enrollment: a certificate from a verified CA creates its identity."""
        model = read_model(req, EnrollCa, allow_empty=True)
        self.enroll.ca(presented_chain(req), model.name)
        empty(resp)

    def on_post_updb(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll an identity with a one-time token by setting its password."""
        model = read_model(req, EnrollUpdb)
        self.enroll.updb(req.get_param("token"), model.username, model.password)
        empty(resp)

    def on_post_erott(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll an edge router with its one-time token and two CSRs."""
        model = read_model(req, EnrollErott)
        answer_router(
            resp, self.enroll.router(EDGE_ROUTER_OTT, model.token, model.server_csr, model.client_csr)
        )

    def on_post_token(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll with an external identity provider's JWT (``Authorization: Bearer``)."""
        model = read_model(req, TokenEnrollmentRequest, allow_empty=True)
        issuer_id = req.get_header(TOKEN_ISSUER_HEADER)
        result = self.enroll.token(bearer_tokens(req), issuer_id, model.client_csr)
        if result.issued is None:
            empty(resp)
        else:
            ok(resp, {"cert": result.issued.chain_pem, "ca": result.ca_pem})

    def on_post_extend_router(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Extend a router's certificates; made with its current client certificate."""
        model = read_model(req, RouterExtend)
        chain = presented_chain(req)
        answer_router(resp, self.enroll.extend_router(chain, model.server_cert_csr, model.cert_csr))


def register(routes: Routes) -> None:
    enroll = routes.managers.enroll
    routes.client("/enroll", EnrollResource(enroll))
    typed = TypedEnrollResource(enroll)
    for name in ("ott", "ottca", "ca", "updb", "erott", "token"):
        routes.client(f"/enroll/{name}", typed, suffix=f"{name}")
    routes.client("/enroll/extend/router", typed, suffix="extend_router")
