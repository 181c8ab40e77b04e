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
    ├── EntityCanNotBeUpdatedError          ENTITY_CAN_NOT_BE_UPDATED
    ├── EnrollmentExistsError               ENROLLMENT_EXISTS
    ├── CertificateIsNotCaError             CERTIFICATE_IS_NOT_CA
    ├── InvalidCertPemError                 INVALID_CERT_PEM
    ├── NameConflictError                   COULD_NOT_VALIDATE (duplicate unique field)
    └── RequestEntityTooLargeError          REQUEST_ENTITY_TOO_LARGE
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
        if self.value is not None:
            out["value"] = _stringify(self.value)
        return out


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
