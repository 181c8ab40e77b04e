"""Domain errors, each carrying the OpenZiti ``error.code`` string.

The tree (HTTP statuses live only in ``api/errors.py``)::

    ControllerError
    ├── NotFoundError                       NOT_FOUND
    ├── FieldError                          COULD_NOT_VALIDATE (cause: field, value, reason)
    ├── InvalidFilterError                  INVALID_FILTER
    ├── InvalidPaginationError              INVALID_PAGINATION
    ├── InvalidSortError                    INVALID_SORT_IDENTIFIER
    ├── CouldNotParseBodyError              COULD_NOT_PARSE_BODY
    ├── UnauthorizedError                   UNAUTHORIZED
    ├── InvalidAuthError                    INVALID_AUTH
    ├── InvalidAuthMethodError              INVALID_AUTH_METHOD
    ├── ReferencedEntityError               CAN_NOT_DELETE_REFERENCED_ENTITY
    ├── EntityCanNotBeDeletedError          ENTITY_CAN_NOT_BE_DELETED
    │   └── SystemPolicyCanNotBeDeletedError  (a system edge router policy; cause UNHANDLED)
    ├── EntityCanNotBeUpdatedError          ENTITY_CAN_NOT_BE_UPDATED
    │   └── SystemPolicyCanNotBeUpdatedError  (a system edge router policy; cause UNHANDLED)
    ├── AuthenticatorMethodMaxError         MAX_AUTHENTICATOR_METHODS_REACHED
    ├── AuthenticatorCanNotBeUpdatedError   CAN_NOT_UPDATE_AUTHENTICATOR
    ├── EnrollmentExistsError               ENROLLMENT_EXISTS
    ├── EnrollmentError                     (enrollment refusals)
    │   ├── InvalidEnrollmentTokenError     INVALID_ENROLLMENT_TOKEN
    │   │   └── UnknownEnrollmentTokenError INVALID_ENROLLMENT_TOKEN (404: an unknown ott/updb token)
    │   ├── EnrollmentExpiredError          ENROLLMENT_EXPIRED
    │   ├── InvalidEnrollMethodError        INVALID_ENROLL_METHOD
    │   ├── MissingOrInvalidCsrError        MISSING_OR_INVALID_CSR
    │   ├── CouldNotProcessCsrError         COULD_NOT_PROCESS_CSR
    │   ├── EnrollmentCaNotValidError       ENROLLMENT_CA_NOT_VALID
    │   ├── EnrollmentNoValidCasError       ENROLLMENT_NO_VALID_CAS
    │   ├── AlreadyEnrolledError            ENROLLMENT_IDENTITY_ALREADY_ENROLLED
    │   ├── EnrollmentNotAllowedError       INVALID_ENROLLMENT_NOT_ALLOWED
    │   └── MissingCertClaimError           MISSING_CERT_CLAIM
    ├── CertInUseError                      CERT_IN_USE
    ├── CertFailedValidationError           CERT_FAILED_VALIDATION
    ├── CertificateFailedValidationError    CERTIFICATE_FAILED_VALIDATION
    ├── InvalidCommonNameError              INVALID_COMMON_NAME
    ├── ExpectedPemCertificateError         EXPECTED_PEM_CERTIFICATE
    ├── CouldNotParseDerBlockError          COULD_NOT_PARSE_DER_BLOCK
    ├── InvalidClientCertError              INVALID_CLIENT_CERT
    ├── CaAlreadyVerifiedError              CA_ALREADY_VERIFIED
    ├── CertificateIsNotCaError             CERTIFICATE_IS_NOT_CA
    ├── InvalidCertPemError                 INVALID_CERT_PEM
    ├── UnsupportedMediaError               UNSUPPORTED_MEDIA
    ├── NameConflictError                   COULD_NOT_VALIDATE (duplicate unique field)
    ├── RequestEntityTooLargeError          REQUEST_ENTITY_TOO_LARGE
    ├── RateLimitedError                    RATE_LIMITED (a database snapshot or integrity run)
    ├── SnapshotNotSupportedError           SNAPSHOT_NOT_SUPPORTED (a store with no file to copy)
    ├── MfaExistsError                      MFA_EXISTS
    ├── MfaInvalidTokenError                MFA_INVALID_TOKEN
    ├── MfaNotEnrolledError                 MFA_NOT_ENROLLED
    │   └── MfaLoginNotEnrolledError        MFA_NOT_ENROLLED (401 at /authenticate/mfa)
    ├── InvalidPostureError                 INVALID_POSTURE (cause: failed policies)
    ├── NoEdgeRoutersAvailableError         NO_EDGE_ROUTERS_AVAILABLE
    ├── TooManyRequestsError                SERVER_TOO_MANY_REQUESTS (a client's budget is spent)
    ├── RequestTimeoutError                 TIMEOUT (the request's time budget ran out)
    └── CommitFailedError                   COMMIT_FAILED (a write batch could not be made durable)
"""

from __future__ import annotations

from typing import Any


class ControllerError(Exception):
    """Base of every error the controller reports to a client."""

    code = "UNHANDLED"
    default_message = "An unhandled error occurred"

    def __init__(
        self,
        message: str | None = None,
        *,
        field: str | None = None,
        value: Any = None,
        reason: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.message = message or self.default_message
        self.field = field
        self.value = value
        self.reason = reason
        self.headers = dict(headers or {})
        super().__init__(self.message)

    def cause(self) -> dict[str, Any] | None:
        """The OpenZiti ``cause`` object, or None when the error has no cause."""
        if self.field is None and self.reason is None:
            return None
        out: dict[str, Any] = {}
        if self.field is not None:
            out["field"] = self.field
        if self.reason is not None:
            out["reason"] = self.reason
        if self.value is not None and not _is_secret(self.field):
            out["value"] = _stringify(self.value)
        return out


def _is_secret(field: str | None) -> bool:
    """A field whose value is never echoed in a cause (``password``, ``currentPassword``, ...)."""
    return field is not None and "password" in field.lower()


def _stringify(value: Any) -> str:
    """Render a cause value the way Go's ``%v`` renders it (lists as ``[a b]``)."""
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(_stringify(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class NotFoundError(ControllerError):
    code = "NOT_FOUND"
    default_message = "The resource requested was not found or is no longer available"


class MethodNotAllowedError(ControllerError):
    """The resource exists but does not take this HTTP verb here (405)."""

    code = "METHOD_NOT_ALLOWED"
    default_message = "The resource requested does not support this HTTP verb"


class FieldError(ControllerError):
    """An invalid value in a request field (OpenZiti INVALID_FIELD, rendered COULD_NOT_VALIDATE)."""

    code = "COULD_NOT_VALIDATE"
    default_message = (
        "The supplied request contains an invalid document or no valid accept content "
        "were available, see cause"
    )

    def __init__(self, field: str, reason: str, value: Any = None) -> None:
        super().__init__(None, field=field, value=value, reason=reason)


class NameConflictError(FieldError):
    """A unique field (usually ``name``) already used by another entity of the same kind."""

    def __init__(self, field: str, value: Any, store: str) -> None:
        super().__init__(field, f"duplicate value '{value}' in unique index on {store} store", value)


class InvalidFilterError(ControllerError):
    code = "INVALID_FILTER"
    default_message = "The filter query supplied is invalid"


class InvalidPaginationError(ControllerError):
    code = "INVALID_PAGINATION"
    default_message = "The pagination properties provided are invalid"


class InvalidSortError(ControllerError):
    code = "INVALID_SORT_IDENTIFIER"
    default_message = "The sort order supplied is invalid"


class CouldNotParseBodyError(ControllerError):
    code = "COULD_NOT_PARSE_BODY"
    default_message = "The body of the request could not be parsed"


class UnauthorizedError(ControllerError):
    code = "UNAUTHORIZED"
    default_message = (
        "The request could not be completed. The session is not authorized or the credentials are invalid"
    )


class InvalidAuthError(ControllerError):
    code = "INVALID_AUTH"
    default_message = "The authentication request failed"


class InvalidAuthMethodError(ControllerError):
    code = "INVALID_AUTH_METHOD"
    default_message = "The supplied authentication method is not valid"


class ReferencedEntityError(ControllerError):
    code = "CAN_NOT_DELETE_REFERENCED_ENTITY"
    default_message = "The entity requested for delete can not be deleted because it is referenced"


class EntityCanNotBeDeletedError(ControllerError):
    code = "ENTITY_CAN_NOT_BE_DELETED"
    default_message = "The entity requested for delete can not be deleted"


class EntityCanNotBeUpdatedError(ControllerError):
    code = "ENTITY_CAN_NOT_BE_UPDATED"
    default_message = "The entity requested for update can not be updated"


class EnrollmentExistsError(ControllerError):
    code = "ENROLLMENT_EXISTS"
    default_message = "An enrollment already exists for the selected identity and method"


class CertificateIsNotCaError(ControllerError):
    code = "CERTIFICATE_IS_NOT_CA"
    default_message = "The supplied certificate is not a CA"


class InvalidCertPemError(ControllerError):
    code = "INVALID_CERT_PEM"
    default_message = "The supplied certificate PEM is invalid"


class RequestEntityTooLargeError(ControllerError):
    code = "REQUEST_ENTITY_TOO_LARGE"
    default_message = "The request body is too large"


class SnapshotNotSupportedError(ControllerError):
    """``POST /database/snapshot`` on a store that keeps no database file of its own to copy
    (PostgreSQL, whose backups are ``pg_dump``'s; the in-memory store): Trellis's own refusal,
    OpenZiti's bbolt store always has a file."""

    code = "SNAPSHOT_NOT_SUPPORTED"
    default_message = "This controller's store keeps no database file to snapshot"


class RateLimitedError(ControllerError):
    """An operation that may not run again yet: a second data integrity run while one runs, a
    database snapshot within a minute of the last (OpenZiti's ``apierror.NewRateLimited``)."""

    code = "RATE_LIMITED"
    default_message = (
        "The resource is rate limited and the rate limit has been exceeded. Please try again later"
    )


class EnrollmentError(ControllerError):
    """Base of the refusals of an enrollment request."""


class InvalidEnrollmentTokenError(EnrollmentError):
    code = "INVALID_ENROLLMENT_TOKEN"
    default_message = "The supplied token is not valid"


class EnrollmentExpiredError(EnrollmentError):
    code = "ENROLLMENT_EXPIRED"
    default_message = "The enrollment token has expired"


class InvalidEnrollMethodError(EnrollmentError):
    code = "INVALID_ENROLL_METHOD"
    default_message = "The enrollment method requested is invalid"


class MissingOrInvalidCsrError(EnrollmentError):
    code = "MISSING_OR_INVALID_CSR"
    default_message = "The request is missing or has an invalid CSR"


class CouldNotProcessCsrError(EnrollmentError):
    code = "COULD_NOT_PROCESS_CSR"
    default_message = "The supplied csr could not be processed"


class EnrollmentCaNotValidError(EnrollmentError):
    code = "ENROLLMENT_CA_NOT_VALID"
    default_message = "The CA tied to the supplied token is no longer valid"


class EnrollmentNoValidCasError(EnrollmentError):
    code = "ENROLLMENT_NO_VALID_CAS"
    default_message = "The certificate was not signed by any CA that allows auto enrollment"


class AlreadyEnrolledError(EnrollmentError):
    code = "ENROLLMENT_IDENTITY_ALREADY_ENROLLED"
    default_message = "The identity is already enrolled"


class EnrollmentNotAllowedError(EnrollmentError):
    """An external JWT enrollment its signer or the enrolment auth policy does not allow."""

    code = "INVALID_ENROLLMENT_NOT_ALLOWED"
    default_message = "The requested enrollment is not allowed"


class MissingCertClaimError(EnrollmentError):
    code = "MISSING_CERT_CLAIM"
    default_message = "The certificate is missing the claim the CA requires"


class CertInUseError(ControllerError):
    code = "CERT_IN_USE"
    default_message = "The certificate supplied is already associated with another identity"


class CertFailedValidationError(ControllerError):
    code = "CERT_FAILED_VALIDATION"
    default_message = "The certificate failed to validate"


class CertificateFailedValidationError(ControllerError):
    code = "CERTIFICATE_FAILED_VALIDATION"
    default_message = "The supplied certificate failed to validate against the CA's certificate chain"


class InvalidCommonNameError(ControllerError):
    code = "INVALID_COMMON_NAME"
    default_message = "The common name of the certificate is invalid"


class ExpectedPemCertificateError(ControllerError):
    code = "EXPECTED_PEM_CERTIFICATE"
    default_message = "The supplied PEM block was not a certificate"


class CouldNotParseDerBlockError(ControllerError):
    code = "COULD_NOT_PARSE_DER_BLOCK"
    default_message = "The supplied PEM block could not be parsed as DER"


class InvalidClientCertError(ControllerError):
    code = "INVALID_CLIENT_CERT"
    default_message = "The provided client certificate is invalid"


class CaAlreadyVerifiedError(ControllerError):
    code = "CA_ALREADY_VERIFIED"
    default_message = "The CA has already been verified"


class UnsupportedMediaError(ControllerError):
    code = "UNSUPPORTED_MEDIA"
    default_message = "The request media type is not supported"


class MfaExistsError(ControllerError):
    code = "MFA_EXISTS"
    default_message = "An MFA record already exists, try removing it"


class MfaInvalidTokenError(ControllerError):
    code = "MFA_INVALID_TOKEN"
    default_message = "An invalid token/code was provided"


class MfaNotEnrolledError(ControllerError):
    code = "MFA_NOT_ENROLLED"
    default_message = "The current identity is not enrolled in MFA"


class MfaLoginNotEnrolledError(MfaNotEnrolledError):
    """Completing a login's MFA without a verified enrollment (answered 401, not 404: seed 000
    lists 401 and 429 only for ``/authenticate/mfa``)."""


class InvalidPostureError(ControllerError):
    """Session creation refused for posture; the cause names the failing policies and checks.

    ``data`` maps each failing policy id to its failing checks as the client sees them
    (``{id, typeId, isPassing: false}``), OpenZiti's ``GenericCauseError`` data map.
    """

    code = "INVALID_POSTURE"
    default_message = "Posture response data is missing or wrong"

    def __init__(
        self, policy_ids: list[str] | None = None, data: dict[str, list[dict[str, Any]]] | None = None
    ) -> None:
        super().__init__()
        self.policy_ids = list(policy_ids or [])
        self.data = dict(data or {})

    def cause(self) -> dict[str, Any] | None:
        return {
            "message": "Failed to pass posture checks for service policies: " + _stringify(self.policy_ids),
            "data": self.data,
        }


class NoEdgeRoutersAvailableError(ControllerError):
    code = "NO_EDGE_ROUTERS_AVAILABLE"
    default_message = "No edge routers are assigned and online to handle the requested connection"


class TooManyRequestsError(ControllerError):
    """A client spent its request budget (authentication or writes); ``Retry-After`` says when to
    come back. OpenZiti's code and text (``apierror.NewTooManyUpdatesError``)."""

    code = "SERVER_TOO_MANY_REQUESTS"
    default_message = (
        "Too many requests to alter state have been issued. Please slow your request rate or try again later."
    )


class RequestTimeoutError(ControllerError):
    """The request ran past its time budget (OpenZiti ``apierror.TimeoutCode``)."""

    code = "TIMEOUT"
    default_message = "The requested operation took too much time to reply"


class CommitFailedError(ControllerError):
    """The batch holding this request's changes could not be made durable: none of it (nor
    anything staged after it) was applied, in the database, in memory or in the policy engine.
    Trellis's own code (OpenZiti answers 500 ``UNHANDLED`` when its store fails); a retry may pass."""

    code = "COMMIT_FAILED"
    default_message = "The change could not be stored and was not applied. Please try again later"


class AuthenticatorMethodMaxError(ControllerError):
    code = "MAX_AUTHENTICATOR_METHODS_REACHED"
    default_message = "The identity already has the maximum authenticators of the specified method"


class AuthenticatorCanNotBeUpdatedError(ControllerError):
    code = "CAN_NOT_UPDATE_AUTHENTICATOR"
    default_message = "The authenticator cannot be updated in this fashion"


class UnknownEnrollmentTokenError(NotFoundError, InvalidEnrollmentTokenError):
    """``INVALID_ENROLLMENT_TOKEN`` answered 404: a well-formed ``ott`` or ``updb`` token that names
    no outstanding enrollment (seed document 1 lists 404, not 400, for those two operations).

    A :class:`~engine.errors.NotFoundError` first, so the API's status table (which walks the
    class's MRO) answers 404, and still an :class:`~engine.errors.InvalidEnrollmentTokenError`
    with its code and message for everyone else.
    """

    code = InvalidEnrollmentTokenError.code
    default_message = InvalidEnrollmentTokenError.default_message


def _system_cause(operation: str, id: str) -> dict[str, Any]:
    """OpenZiti wraps a plain error as the cause: ``{code: UNHANDLED, message}``."""
    return {
        "code": "UNHANDLED",
        "message": f"cannot {operation} system edgeRouterPolicy in a non-system context (id={id})",
    }


class SystemPolicyCanNotBeUpdatedError(EntityCanNotBeUpdatedError):
    def __init__(self, id: str) -> None:
        super().__init__()
        self._cause = _system_cause("update", id)

    def cause(self) -> dict[str, Any] | None:
        return self._cause


class SystemPolicyCanNotBeDeletedError(EntityCanNotBeDeletedError):
    def __init__(self, id: str) -> None:
        super().__init__()
        self._cause = _system_cause("delete", id)

    def cause(self) -> dict[str, Any] | None:
        return self._cause
