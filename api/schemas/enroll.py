"""Enrollment request bodies (client API ``/enroll*``) and the certificate answers."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from api.wire import WireModel

Username = Annotated[str, Field(min_length=4, max_length=100)]
Password = Annotated[str, Field(min_length=5, max_length=100)]


class GenericEnroll(WireModel):
    """``POST /enroll`` with a JSON body (OpenZiti's ``genericEnroll``)."""

    name: str | None = None
    client_csr: str | None = None
    server_cert_csr: str | None = None
    cert_csr: str | None = None
    username: Username | None = None
    password: Password | None = None


class EnrollOtt(WireModel):
    """``/enroll/ott``'s JSON body; the token may come in the query instead (seed document 1:
    ``?token=``, with a PEM CSR as the body)."""

    token: str | None = None
    client_csr: str


class EnrollOttCa(WireModel):
    token: str


class EnrollCa(WireModel):
    name: str | None = None


class EnrollUpdb(WireModel):
    username: Username | None = None
    password: Password


class EnrollErott(WireModel):
    token: str
    server_csr: str
    client_csr: str


class RouterExtend(WireModel):
    cert_csr: str
    server_cert_csr: str
