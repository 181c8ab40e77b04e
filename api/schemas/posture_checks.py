"""Posture check wire shapes: request models per type (``typeId`` discriminates) and renderers.

Each type has a create, update (replace) and patch model: the common header
(``postureCheckCreate``/``Update``/``Patch``) plus that type's fields from the spec
(``postureCheckDomainCreate`` ...). ``typeId`` is required on create and patch, optional on
replace (the stored type is kept).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field

from api.controller import Controller
from api.schemas.posture import MAX_PATH_LENGTH
from api.wire import MAX_DURATION_SECONDS, Attributes, Semantic, Tags, WireModel, base
from engine.entities.posture import PostureCheck
from engine.managers.posture_checks import (
    DOMAIN,
    MAC,
    MFA,
    OS,
    PROCESS,
    PROCESS_MULTI,
    PostureCheckType,
)
from engine.query import Symbol, SymbolTable, SymbolType

OsType = Literal["Windows", "WindowsServer", "Android", "iOS", "Linux", "macOS"]


class OperatingSystem(WireModel):
    """One operating system of an OS check. OpenZiti's own CLI sends ``{"Type": ..., "Versions":
    [...]}`` (a Go struct without JSON tags), which OpenZiti takes since Go matches JSON keys
    ignoring case: both spellings are taken here."""

    type: OsType = Field(validation_alias=AliasChoices("type", "Type"))
    versions: list[str] = Field(validation_alias=AliasChoices("versions", "Versions"))


#: A process check's path is at most what a posture response may report (so that an SDK echoing
#: it is never refused).
CheckPath = Annotated[str, Field(max_length=MAX_PATH_LENGTH)]


class Process(WireModel):
    os_type: OsType
    path: CheckPath
    hashes: list[str] | None = None
    signer_fingerprint: str | None = None


class ProcessMulti(WireModel):
    os_type: OsType
    path: CheckPath
    hashes: list[str] | None = None
    signer_fingerprints: list[str] | None = None


NonEmptyStrings = Annotated[list[str], Field(min_length=1)]
NonEmptyOperatingSystems = Annotated[list[OperatingSystem], Field(min_length=1)]
NonEmptyProcesses = Annotated[list[ProcessMulti], Field(min_length=1)]


# -- the common header ------------------------------------------------------------------------
class _Header(WireModel):
    role_attributes: Attributes = None
    tags: Tags = None


class PostureCheckCreate(_Header):
    name: str
    type_id: str


class PostureCheckUpdate(_Header):
    name: str
    type_id: str | None = None


class PostureCheckPatch(_Header):
    name: str | None = None
    type_id: str


# -- type fields: required (create/update) and optional (patch) -------------------------------
class _Domain(WireModel):
    domains: NonEmptyStrings


class _DomainPatch(WireModel):
    domains: NonEmptyStrings | None = None


class _Mac(WireModel):
    mac_addresses: NonEmptyStrings


class _MacPatch(WireModel):
    mac_addresses: NonEmptyStrings | None = None


class _Os(WireModel):
    operating_systems: NonEmptyOperatingSystems


class _OsPatch(WireModel):
    operating_systems: NonEmptyOperatingSystems | None = None


class _Process(WireModel):
    process: Process


class _ProcessPatch(WireModel):
    process: Process | None = None


class _ProcessMulti(WireModel):
    processes: NonEmptyProcesses
    semantic: Semantic


class _ProcessMultiPatch(WireModel):
    processes: NonEmptyProcesses | None = None
    semantic: Semantic | None = None


class _Mfa(WireModel):
    timeout_seconds: Annotated[int, Field(le=MAX_DURATION_SECONDS)] | None = None
    prompt_on_wake: bool | None = None
    prompt_on_unlock: bool | None = None
    ignore_legacy_endpoints: bool | None = None


class PostureCheckDomainCreate(PostureCheckCreate, _Domain): ...


class PostureCheckDomainUpdate(PostureCheckUpdate, _Domain): ...


class PostureCheckDomainPatch(PostureCheckPatch, _DomainPatch): ...


class PostureCheckMacAddressCreate(PostureCheckCreate, _Mac): ...


class PostureCheckMacAddressUpdate(PostureCheckUpdate, _Mac): ...


class PostureCheckMacAddressPatch(PostureCheckPatch, _MacPatch): ...


class PostureCheckOperatingSystemCreate(PostureCheckCreate, _Os): ...


class PostureCheckOperatingSystemUpdate(PostureCheckUpdate, _Os): ...


class PostureCheckOperatingSystemPatch(PostureCheckPatch, _OsPatch): ...


class PostureCheckProcessCreate(PostureCheckCreate, _Process): ...


class PostureCheckProcessUpdate(PostureCheckUpdate, _Process): ...


class PostureCheckProcessPatch(PostureCheckPatch, _ProcessPatch): ...


class PostureCheckProcessMultiCreate(PostureCheckCreate, _ProcessMulti): ...


class PostureCheckProcessMultiUpdate(PostureCheckUpdate, _ProcessMulti): ...


class PostureCheckProcessMultiPatch(PostureCheckPatch, _ProcessMultiPatch): ...


class PostureCheckMfaCreate(PostureCheckCreate, _Mfa): ...


class PostureCheckMfaUpdate(PostureCheckUpdate, _Mfa): ...


class PostureCheckMfaPatch(PostureCheckPatch, _Mfa): ...


#: typeId -> (create, update, patch) models and the type's own fields (snake_case).
MODELS: dict[str, tuple[type[PostureCheckCreate], type[PostureCheckUpdate], type[PostureCheckPatch]]] = {
    DOMAIN: (PostureCheckDomainCreate, PostureCheckDomainUpdate, PostureCheckDomainPatch),
    MAC: (PostureCheckMacAddressCreate, PostureCheckMacAddressUpdate, PostureCheckMacAddressPatch),
    OS: (
        PostureCheckOperatingSystemCreate,
        PostureCheckOperatingSystemUpdate,
        PostureCheckOperatingSystemPatch,
    ),
    PROCESS: (PostureCheckProcessCreate, PostureCheckProcessUpdate, PostureCheckProcessPatch),
    PROCESS_MULTI: (
        PostureCheckProcessMultiCreate,
        PostureCheckProcessMultiUpdate,
        PostureCheckProcessMultiPatch,
    ),
    MFA: (PostureCheckMfaCreate, PostureCheckMfaUpdate, PostureCheckMfaPatch),
}

TYPE_FIELDS: dict[str, tuple[str, ...]] = {
    DOMAIN: tuple(_Domain.model_fields),
    MAC: tuple(_Mac.model_fields),
    OS: tuple(_Os.model_fields),
    PROCESS: tuple(_Process.model_fields),
    PROCESS_MULTI: tuple(_ProcessMulti.model_fields),
    MFA: tuple(_Mfa.model_fields),
}


def type_details(model: WireModel, type_id: str, *, only_set: bool = False) -> dict[str, Any]:
    """The type's fields of ``model`` in wire (camelCase) form; a patch keeps only non-null sent ones."""
    names = set(TYPE_FIELDS[type_id])
    if only_set:
        names &= {n for n in model.model_fields_set if getattr(model, n) is not None}
    return model.model_dump(by_alias=True, include=names)


# -- renderers --------------------------------------------------------------------------------
def render_posture_check(ctrl: Controller, check: PostureCheck) -> dict[str, Any]:
    """``postureCheck<Type>Detail``: the common detail plus the type's fields."""
    out = base(check)
    out.update(
        {
            "name": check.name,
            "roleAttributes": list(check.role_attributes),
            "typeId": check.type_id,
            "version": check.version,
        }
    )
    out.update(check.details)
    return out


def render_posture_check_type(check_type: PostureCheckType) -> dict[str, Any]:
    """``postureCheckTypeDetail``."""
    out = base(check_type)
    out.update(
        {
            "name": check_type.name,
            "operatingSystems": [dict(os) for os in check_type.operating_systems],
            "version": "1",
        }
    )
    return out


def _mfa_flag(field: str) -> Symbol:
    """An MFA check's ``promptOnUnlock`` / ``promptOnWake`` (false when never set), null for a
    check of another type: OpenZiti keeps them only on MFA checks (its ``= null`` matches the
    others)."""

    def get(check: PostureCheck) -> bool | None:
        return check.details.get(field) is True if check.type_id == MFA else None

    return Symbol(SymbolType.BOOL, get)


POSTURE_CHECK_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda e: e.id),
        "name": Symbol(SymbolType.STRING, lambda e: e.name),
        "typeId": Symbol(SymbolType.STRING, lambda e: e.type_id),
        "roleAttributes": Symbol(SymbolType.STRING, lambda e: e.role_attributes, is_set=True),
        "promptOnUnlock": _mfa_flag("promptOnUnlock"),
        "promptOnWake": _mfa_flag("promptOnWake"),
        "createdAt": Symbol(SymbolType.DATETIME, lambda e: e.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda e: e.updated_at),
    },
    tags_getter=lambda e: e.tags,
)


POSTURE_CHECK_TYPE_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda e: e.id),
        "name": Symbol(SymbolType.STRING, lambda e: e.name),
        "createdAt": Symbol(SymbolType.DATETIME, lambda e: e.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda e: e.updated_at),
    },
    tags_getter=lambda e: e.tags,
)
