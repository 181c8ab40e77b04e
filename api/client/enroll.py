"""``/enroll*`` (client API, no session): every enrollment method, the legacy and the typed routes.

``POST /enroll?method=&token=`` is what SDKs call (docs/api.md §6.3): a ``text/plain``,
``application/x-pem-file`` or ``application/pkcs7`` body is a PEM CSR (the legacy path; also an
empty body for ``method=ca``); a JSON body is OpenZiti's ``genericEnroll``. Without ``method``
the token's own method is used; a ``method`` that is not the token's is refused
(``INVALID_ENROLL_METHOD``). The typed routes (``/enroll/ott``, ``/ottca``, ``/ca``,
``/updb``, ``/erott``, ``/extend/router``, ``/token``) take the spec's bodies; ``/enroll/ott``
also the seed's ``?token=`` with a PEM CSR body.

``POST /enroll/token`` enrolls with an external identity provider's JWT, sent as
``Authorization: Bearer`` (the optional ``ziti-token-issuer-id`` header names the signer to check
it with). A ``{"clientCsr"}`` body asks for a certificate: ``{"data": {"cert", "ca"}}``; without
one the identity logs in with that provider's tokens: ``{"data": {}}``.

An ``ott`` enrollment answers the certificate chain as PEM text (``application/x-pem-file``, seed
document 1) on every route, or as JSON ``{"data": {"cert": ...}}`` when the client's ``Accept``
prefers JSON (:func:`certificate_format`: the C SDK's ``Accept: application/json``); the other
methods answer JSON. The format is settled before the token is spent. Errors are JSON; a client
that does not accept JSON gets them with status 406 instead of their own (the code and cause
stay), and is refused with 406 before anything happens when nothing it accepts can be answered.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import falcon

from api.errors import handle_controller_error, status_of
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
from engine.errors import ControllerError, FieldError
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
JSON_TYPE = "application/json"
#: The two answers a certificate may take, ``certificate_format``'s results.
PEM, JSON = "pem", "json"

Responder = Callable[[Any, falcon.Request, falcon.Response], None]


def _accept_ranges(req: falcon.Request) -> list[tuple[str, float]]:
    """The ``Accept`` media ranges with their q-values (q=0 kept: it excludes); ``*/*`` without one."""
    header = req.get_header("Accept")
    if not header or not header.strip():
        return [("*/*", 1.0)]
    ranges: list[tuple[str, float]] = []
    for item in header.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        if media:
            ranges.append(("*/*" if media == "*" else media.lower(), q))
    return ranges


def _quality(ranges: list[tuple[str, float]], media: str) -> tuple[float, int]:
    """(q, specificity) of ``media`` under ``ranges``: the q of the most specific range matching
    it (RFC 9110 §12.5.1; specificity 2 for the type itself, 1 for ``type/*``, 0 for ``*/*``),
    (0, -1) when none does."""
    family = media.split("/", 1)[0] + "/*"
    found = (0.0, -1)
    for candidate, q in ranges:
        specificity = (
            2 if candidate == media else 1 if candidate == family else 0 if candidate == "*/*" else -1
        )
        if specificity > found[1]:
            found = (q, specificity)
    return found


def accepts_json(req: falcon.Request) -> bool:
    """Whether the client takes a JSON answer (every error is one)."""
    return _quality(_accept_ranges(req), JSON_TYPE)[0] > 0


def _not_acceptable(supported: str) -> FieldError:
    return FieldError("Accept", f"No suitable accept media types were detected, supports: {supported}", None)


def certificate_format(req: falcon.Request, json_body: bool = False) -> str:
    """:data:`PEM` or :data:`JSON` for an ``ott`` answer, as the client's ``Accept`` says.

    PEM (the seed's answer) unless the client prefers JSON: a higher q, or the same q with
    ``application/json`` named where PEM is reached only through a wildcard (``application/json,
    */*``; the C SDK sends ``Accept: application/json``). No ``Accept``, ``*/*``, or both named
    alike: PEM for a PEM CSR body, JSON for the spec's JSON body (``json_body``), as OpenZiti
    v1.6.0 answers ``POST /enroll/ott {"token", "clientCsr"}``. A client that takes neither is
    refused before the token is spent.
    """
    ranges = _accept_ranges(req)
    q_json, json_specificity = _quality(ranges, JSON_TYPE)
    q_pem, pem_specificity = _quality(ranges, PEM_TYPE)
    pem_preferred = q_pem > q_json or (q_pem == q_json and pem_specificity > json_specificity)
    if json_body and q_json > 0 and not pem_preferred:
        return JSON
    if q_pem > 0 and (q_pem > q_json or (q_pem == q_json and pem_specificity >= json_specificity)):
        return PEM
    if q_json > 0:
        return JSON
    raise _not_acceptable(f"{PEM_TYPE}, {JSON_TYPE}")


def require_json_accepted(req: falcon.Request) -> None:
    """Refuse, before anything happens, a client that cannot take this method's JSON answer."""
    if not accepts_json(req):
        raise _not_acceptable(JSON_TYPE)


def negotiated(responder: Responder) -> Responder:
    """An enrollment responder whose refusals reach a client that does not accept JSON (say, one
    that asks only for ``application/x-pem-file``) with status 406: errors exist only as JSON,
    which that client refused. The body is the error's usual envelope (code, cause), so the
    reason is still there for whoever reads it. What is worth a retry keeps its status: 429 (and
    its ``Retry-After``) and 5xx."""

    @functools.wraps(responder)
    def wrapper(self: Any, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            responder(self, req, resp)
        except ControllerError as ex:
            status = status_of(ex)
            if accepts_json(req) or status == 429 or status >= 500:
                raise
            handle_controller_error(req, resp, ex, {})
            resp.status = falcon.HTTP_406

    return wrapper


def answer_certificate(resp: falcon.Response, issued: IssuedCertificate, fmt: str) -> None:
    """The chain of an ``ott`` enrollment in ``fmt`` (:func:`certificate_format`, decided before
    enrolling): PEM text as ``application/x-pem-file`` exactly (the C SDK compares the whole
    header), else the JSON envelope."""
    if fmt == PEM:
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

    @negotiated
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        token = req.get_param("token")
        asked = req.get_param("method")
        method = asked if asked == CA else self.enroll.method_of(token, asked)
        # the answer's format is settled (or refused) before anything is read or spent
        fmt = certificate_format(req) if method == OTT else JSON
        if method != OTT:
            require_json_accepted(req)
        media = _media_type(req)
        if media in LEGACY_TYPES or (not media and method == CA):
            self._legacy(req, resp, method, token, fmt)
        else:
            self._generic(req, resp, method, token, fmt)

    def _legacy(
        self, req: falcon.Request, resp: falcon.Response, method: str, token: str | None, fmt: str
    ) -> None:
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

    def _generic(
        self, req: falcon.Request, resp: falcon.Response, method: str, token: str | None, fmt: str
    ) -> None:
        model = read_model(req, GenericEnroll, allow_empty=method == CA)
        chain = presented_chain(req)
        if method == OTT:
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

    @negotiated
    def on_post_ott(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll an identity with a one-time token and a CSR."""
        legacy = _media_type(req) in LEGACY_TYPES
        fmt = certificate_format(req, json_body=not legacy)
        if legacy:  # the seed's form: ``?token=``, a PEM CSR as the body
            token = req.get_param("token")
            csr = read_body(req, req.context.max_body_bytes).decode("utf-8", "replace")
        else:  # the spec's ``{token, clientCsr}`` (the token may still come in the query)
            model = read_model(req, EnrollOtt)
            token, csr = model.token or req.get_param("token"), model.client_csr
        answer_certificate(resp, self.enroll.ott(token, csr), fmt)

    @negotiated
    def on_post_ottca(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll an identity with a one-time token and a certificate from the enrollment's CA."""
        require_json_accepted(req)
        model = read_model(req, EnrollOttCa)
        self.enroll.ottca(model.token, presented_chain(req))
        empty(resp)

    @negotiated
    def on_post_ca(self, req: falcon.Request, resp: falcon.Response) -> None:
        """CA auto-enrollment: a certificate from a verified CA creates its identity."""
        require_json_accepted(req)
        model = read_model(req, EnrollCa, allow_empty=True)
        self.enroll.ca(presented_chain(req), model.name)
        empty(resp)

    @negotiated
    def on_post_updb(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll an identity with a one-time token by setting its password."""
        require_json_accepted(req)
        model = read_model(req, EnrollUpdb)
        self.enroll.updb(req.get_param("token"), model.username, model.password)
        empty(resp)

    @negotiated
    def on_post_erott(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll an edge router with its one-time token and two CSRs."""
        require_json_accepted(req)
        model = read_model(req, EnrollErott)
        answer_router(
            resp, self.enroll.router(EDGE_ROUTER_OTT, model.token, model.server_csr, model.client_csr)
        )

    @negotiated
    def on_post_token(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Enroll with an external identity provider's JWT (``Authorization: Bearer``)."""
        require_json_accepted(req)
        model = read_model(req, TokenEnrollmentRequest, allow_empty=True)
        issuer_id = req.get_header(TOKEN_ISSUER_HEADER)
        result = self.enroll.token(bearer_tokens(req), issuer_id, model.client_csr)
        if result.issued is None:
            empty(resp)
        else:
            ok(resp, {"cert": result.issued.chain_pem, "ca": result.ca_pem})

    @negotiated
    def on_post_extend_router(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Extend a router's certificates; made with its current client certificate."""
        require_json_accepted(req)
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
