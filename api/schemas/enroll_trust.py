"""The enrollment nonce challenge (client API ``POST /enroll/challenge``): OpenZiti's
``nonceChallenge`` request and ``nonceSignature`` answer."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from api.wire import WireModel
from engine.managers.enrollment.trust import NonceSignature

#: go-openapi's ``uuid`` format: hyphenated hex, any case.
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _uuid(value: str) -> str:
    if not _UUID.match(value):
        raise PydanticCustomError("uuid", f'nonce in body must be of type uuid: "{value}"')
    return value


Uuid = Annotated[str, AfterValidator(_uuid)]


class NonceChallenge(WireModel):
    """A nonce (a UUID) to sign, and the ``kid`` of the enrollment key to sign it with."""

    nonce: Uuid
    key_id: str


def nonce_signature(signed: NonceSignature) -> dict[str, Any]:
    """OpenZiti's ``nonceSignature``."""
    return {
        "signature": signed.signature,
        "algorithm": signed.algorithm,
        "kid": signed.kid,
        "caPool": signed.ca_pool,
    }
