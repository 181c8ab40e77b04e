"""HTTP status per error class and the handlers that render the OpenZiti error envelope."""

from __future__ import annotations

import logging
from typing import Any

import falcon
from pydantic import ValidationError

from engine import errors as e
from engine.analysis.guardrails import GuardrailViolationError

log = logging.getLogger("trellis.api")

ERROR_META = {"apiEnrollmentVersion": "0.0.1", "apiVersion": "0.0.1"}
#: ``Retry-After`` (seconds) of a write refused because the store cannot make it durable now (the
#: database away, a full disk): soon, as a restarted database is back within seconds.
COMMIT_RETRY_AFTER_SECONDS = 2

STATUS: dict[type[e.ControllerError], int] = {
    e.ControllerError: 500,
    e.NotFoundError: 404,
    e.MethodNotAllowedError: 405,
    e.FieldError: 400,
    e.InvalidFilterError: 400,
    e.InvalidPaginationError: 400,
    e.InvalidSortError: 400,
    e.CouldNotParseBodyError: 400,
    e.UnauthorizedError: 401,
    e.InvalidAuthError: 401,
    e.InvalidAuthMethodError: 400,
    e.ReferencedEntityError: 409,
    e.EntityCanNotBeDeletedError: 400,
    e.EntityCanNotBeUpdatedError: 400,
    e.EnrollmentExistsError: 409,
    e.CertificateIsNotCaError: 400,
    e.InvalidCertPemError: 400,
    e.RequestEntityTooLargeError: 413,
    e.RateLimitedError: 429,
    e.SnapshotNotSupportedError: 409,
    e.EnrollmentError: 400,
    e.AlreadyEnrolledError: 409,
    e.EnrollmentNotAllowedError: 409,
    e.CertInUseError: 409,
    e.CertFailedValidationError: 400,
    e.CertificateFailedValidationError: 400,
    e.InvalidCommonNameError: 400,
    e.ExpectedPemCertificateError: 400,
    e.CouldNotParseDerBlockError: 400,
    e.InvalidClientCertError: 400,
    e.CaAlreadyVerifiedError: 409,
    e.UnsupportedMediaError: 415,
    # The seeds answer a bad MFA code with 401 and a missing enrollment with 404 (OpenZiti: 400/409).
    e.MfaExistsError: 409,
    e.MfaInvalidTokenError: 401,
    e.MfaNotEnrolledError: 404,
    e.MfaLoginNotEnrolledError: 401,
    e.InvalidPostureError: 409,
    e.NoEdgeRoutersAvailableError: 400,
    e.TooManyRequestsError: 429,
    e.RequestTimeoutError: 503,
    e.CommitFailedError: 503,
    e.AuthenticatorMethodMaxError: 409,
    e.AuthenticatorCanNotBeUpdatedError: 409,
    e.UnknownEnrollmentTokenError: 404,
    GuardrailViolationError: 409,
}

_FALCON_CODES = {
    404: ("NOT_FOUND", e.NotFoundError.default_message),
    405: ("METHOD_NOT_ALLOWED", "The resource requested does not support this HTTP verb"),
    413: ("REQUEST_ENTITY_TOO_LARGE", e.RequestEntityTooLargeError.default_message),
    415: ("UNSUPPORTED_MEDIA", "The request media type is not supported"),
}


def status_of(error: e.ControllerError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def envelope(code: str, message: str, request_id: str, cause: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "requestId": request_id}
    if cause:
        body["cause"] = cause
    return {"error": body, "meta": ERROR_META}


def _request_id(req: falcon.Request) -> str:
    return str(getattr(req.context, "request_id", ""))


def _fields(req: falcon.Request) -> dict[str, Any]:
    """A log line's fields about the request (the path has no query: no secret in it)."""
    return {"request_id": _request_id(req) or None, "method": req.method, "path": req.path}


def _render(resp: falcon.Response, status: int, body: dict[str, Any]) -> None:
    resp.status = falcon.code_to_http_status(status)
    resp.media = body
    resp.content_type = falcon.MEDIA_JSON


def handle_controller_error(
    req: falcon.Request, resp: falcon.Response, ex: e.ControllerError, params: dict[str, Any]
) -> None:
    status = status_of(ex)
    if isinstance(ex, e.CommitFailedError):
        # Expected while the disk is full or the database has gone: the store reports the outage
        # once as it starts, counts while it lasts and once as it ends (engine.logs.Outage).
        log.debug("write refused: %s", ex.message, extra=_fields(req))
        resp.set_header("Retry-After", str(COMMIT_RETRY_AFTER_SECONDS))
    elif isinstance(ex, e.RequestTimeoutError):
        log.warning("request ran out of time", extra=_fields(req))
    elif status >= 500:
        log.exception("request failed", extra=_fields(req))
    for name, value in ex.headers.items():
        resp.set_header(name, value)
    # The message is the code's fixed text; a specific message goes to ``cause.message``.
    cause = ex.cause() or {}
    if ex.message != type(ex).default_message:
        cause.setdefault("message", ex.message)
    _render(resp, status, envelope(ex.code, type(ex).default_message, _request_id(req), cause or None))


def field_error_from_validation(ex: ValidationError) -> e.ControllerError:
    """The first pydantic error as OpenZiti's COULD_NOT_VALIDATE (or COULD_NOT_PARSE_BODY).

    First as OpenZiti's go-swagger models check: property by property in name order, so that a
    body missing several required fields names the same one OpenZiti names (``isAdmin`` before
    ``name`` before ``type``).
    """
    errors = ex.errors(include_url=False)
    if errors[0]["type"] == "json_invalid":
        return e.CouldNotParseBodyError(reason=str(errors[0].get("msg", "")))
    first = min(errors, key=lambda err: [str(p) for p in err.get("loc", ()) if not isinstance(p, int)])
    loc = [str(p) for p in first.get("loc", ()) if not isinstance(p, int)]
    field = ".".join(loc) if loc else "body"
    if first["type"] == "missing":
        reason = f"{field} in body is required"
        value: Any = None
    else:
        reason = str(first.get("msg", "invalid value"))
        value = first.get("input")
        if isinstance(value, (dict, list)) or "password" in field.lower():
            value = None  # never echo a password, even a refused one
    return e.FieldError(field, reason, value)


def handle_validation_error(
    req: falcon.Request, resp: falcon.Response, ex: ValidationError, params: dict[str, Any]
) -> None:
    handle_controller_error(req, resp, field_error_from_validation(ex), params)


def handle_http_error(
    req: falcon.Request, resp: falcon.Response, ex: falcon.HTTPError, params: dict[str, Any]
) -> None:
    status = int(ex.status_code)
    code, message = _FALCON_CODES.get(status, ("COULD_NOT_VALIDATE", str(ex.title or "")))
    cause = None
    if status == 400 and ex.description:
        cause = {"reason": ex.description}
    if ex.headers:
        resp.set_headers(ex.headers)
    _render(resp, status, envelope(code, message, _request_id(req), cause))


def handle_unexpected(
    req: falcon.Request, resp: falcon.Response, ex: Exception, params: dict[str, Any]
) -> None:
    log.exception("request failed with an unhandled error", extra=_fields(req))
    _render(resp, 500, envelope("UNHANDLED", e.ControllerError.default_message, _request_id(req), None))


def install(app: falcon.App[falcon.Request, falcon.Response]) -> None:
    """Register the handlers; falcon picks the most specific class for each exception."""
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(falcon.HTTPError, handle_http_error)
    app.add_error_handler(ValidationError, handle_validation_error)
    app.add_error_handler(e.ControllerError, handle_controller_error)
