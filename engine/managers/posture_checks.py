"""Posture checks: a common header (name, type, role attributes, version) plus per-type details.

The details are kept in wire (camelCase) form in ``PostureCheck.details``, normalised the way
OpenZiti's ``db/posture_check_*.go`` stores them:

========== ====================================================================================
DOMAIN     ``domains`` (non-empty)
MAC        ``macAddresses`` (non-empty; lower-cased, non-hex characters removed)
OS         ``operatingSystems`` [{type, versions}] (non-empty; one entry per type, the last wins,
           ordered by type as OpenZiti's per-type buckets are)
PROCESS    ``process`` {osType, path, hashes, signerFingerprint} (hashes/fingerprint lower-cased)
PROCESS_MULTI ``processes`` [{osType, path, hashes, signerFingerprints}] (non-empty; kept as given,
           ``db/posture_check_process_multi.go`` does not lower-case), ``semantic``
MFA        ``timeoutSeconds`` (<= 0 means no timeout, stored as -1), ``promptOnWake``,
           ``promptOnUnlock``, ``ignoreLegacyEndpoints``
========== ====================================================================================

``version`` starts at 1 and grows by one on every update. Role attributes are free-form (no
``#``/``@`` check, docs/policy.md §1.3). Deleting a check drops ``@id`` from service policies.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.entities import Entity
from engine.entities.posture import PostureCheck
from engine.errors import FieldError
from engine.managers._base import EntityManager
from engine.managers.references import remove_entity_references
from engine.ports import UnitOfWork

DOMAIN, MAC, OS, PROCESS, PROCESS_MULTI, MFA = "DOMAIN", "MAC", "OS", "PROCESS", "PROCESS_MULTI", "MFA"
TYPE_IDS = (OS, PROCESS, DOMAIN, MAC, MFA, PROCESS_MULTI)
OS_TYPES = ("Windows", "WindowsServer", "Android", "iOS", "Linux", "macOS")
NO_TIMEOUT = -1

#: Patch key: type fields to merge into the current details (a PUT passes ``details`` instead).
DETAILS_PATCH = "details_patch"


def _clean_mac(value: str) -> str:
    return re.sub(r"[^a-f0-9]", "", value.lower())


def _lower_all(values: list[str] | None) -> list[str]:
    return [v.lower() for v in values or []]


def _normalize_domain(details: dict[str, Any]) -> dict[str, Any]:
    return {"domains": list(details.get("domains") or [])}


def _normalize_mac(details: dict[str, Any]) -> dict[str, Any]:
    return {"macAddresses": [_clean_mac(m) for m in details.get("macAddresses") or []]}


def _normalize_os(details: dict[str, Any]) -> dict[str, Any]:
    by_type: dict[str, dict[str, Any]] = {}
    for entry in details.get("operatingSystems") or []:
        by_type[entry["type"]] = {"type": entry["type"], "versions": list(entry.get("versions") or [])}
    return {"operatingSystems": [by_type[k] for k in sorted(by_type)]}


def _normalize_process(details: dict[str, Any]) -> dict[str, Any]:
    process = details.get("process")
    if process is None:
        return {"process": None}
    return {
        "process": {
            "osType": process.get("osType"),
            "path": process.get("path"),
            "hashes": _lower_all(process.get("hashes")),
            "signerFingerprint": (process.get("signerFingerprint") or "").lower(),
        }
    }


def _normalize_process_multi(details: dict[str, Any]) -> dict[str, Any]:
    processes = [
        {
            "osType": p.get("osType"),
            "path": p.get("path"),
            "hashes": list(p.get("hashes") or []),
            "signerFingerprints": list(p.get("signerFingerprints") or []),
        }
        for p in details.get("processes") or []
    ]
    return {"processes": processes, "semantic": details.get("semantic")}


def _normalize_mfa(details: dict[str, Any]) -> dict[str, Any]:
    timeout = details.get("timeoutSeconds")
    return {
        "timeoutSeconds": NO_TIMEOUT if timeout is None or timeout <= 0 else int(timeout),
        "promptOnWake": bool(details.get("promptOnWake", False)),
        "promptOnUnlock": bool(details.get("promptOnUnlock", False)),
        "ignoreLegacyEndpoints": bool(details.get("ignoreLegacyEndpoints", False)),
    }


@dataclass(frozen=True)
class TypeRule:
    """How one posture check type's details are checked and normalised."""

    normalize: Callable[[dict[str, Any]], dict[str, Any]]
    #: Fields that must be present (not null).
    required: tuple[str, ...] = ()
    #: List fields that must hold at least one item.
    non_empty: tuple[str, ...] = ()
    #: Nested required fields: (object/list field, sub-field).
    nested_required: tuple[tuple[str, str], ...] = field(default_factory=tuple)


TYPE_RULES: dict[str, TypeRule] = {
    DOMAIN: TypeRule(_normalize_domain, required=("domains",), non_empty=("domains",)),
    MAC: TypeRule(_normalize_mac, required=("macAddresses",), non_empty=("macAddresses",)),
    OS: TypeRule(_normalize_os, required=("operatingSystems",), non_empty=("operatingSystems",)),
    PROCESS: TypeRule(
        _normalize_process,
        required=("process",),
        nested_required=(("process", "osType"), ("process", "path")),
    ),
    PROCESS_MULTI: TypeRule(
        _normalize_process_multi,
        required=("processes", "semantic"),
        non_empty=("processes",),
        nested_required=(("processes", "osType"), ("processes", "path")),
    ),
    MFA: TypeRule(_normalize_mfa),
}


def check_type_id(type_id: object) -> str:
    """``type_id`` when it names a posture check type; FieldError on ``typeId`` otherwise."""
    if not isinstance(type_id, str) or type_id not in TYPE_RULES:
        raise FieldError("typeId", f"typeId must be one of {list(TYPE_IDS)}", type_id)
    return type_id


def _check_details(type_id: str, details: dict[str, Any]) -> None:
    rule = TYPE_RULES[type_id]
    for name in rule.required:
        if details.get(name) is None:
            raise FieldError(name, f"{name} in body is required")
    for name in rule.non_empty:
        if not details.get(name):
            raise FieldError(name, f"{name} in body should have at least 1 items")
    for outer, inner in rule.nested_required:
        value = details.get(outer)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict) and item.get(inner) is None:
                raise FieldError(f"{outer}.{inner}", f"{outer}.{inner} in body is required")


def prepare_details(type_id: str, details: dict[str, Any]) -> dict[str, Any]:
    """``details`` checked against the type's rules and normalised for storage."""
    _check_details(type_id, details)
    return TYPE_RULES[type_id].normalize(details)


def _check_attributes_list(values: object) -> list[str]:
    if values is None:
        return []
    if not isinstance(values, list):
        raise FieldError("roleAttributes", "roleAttributes must be an array of strings")
    return list(values)


class PostureCheckManager(EntityManager[PostureCheck]):
    kind = PostureCheck
    immutable = frozenset({"id", "created_at", "updated_at", "version"})

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> PostureCheck:
        type_id = check_type_id(fields.get("type_id"))
        values = dict(fields)
        values.pop(DETAILS_PATCH, None)
        values["type_id"] = type_id
        values["details"] = prepare_details(type_id, dict(fields.get("details") or {}))
        values["role_attributes"] = _check_attributes_list(fields.get("role_attributes"))
        entity = super().build(uow, values)
        return dataclasses.replace(entity, version=1)

    def apply(self, uow: UnitOfWork, old: PostureCheck, fields: dict[str, Any]) -> PostureCheck:
        values = dict(fields)
        type_id = check_type_id(values.pop("type_id", None) or old.type_id)
        patch = values.pop(DETAILS_PATCH, None)
        if "details" in values:
            details = dict(values.pop("details") or {})
        else:
            details = dict(old.details) if type_id == old.type_id else {}
        if patch:
            details.update(patch)
        if "role_attributes" in values:
            values["role_attributes"] = _check_attributes_list(values["role_attributes"])
        details = prepare_details(type_id, details)
        new = super().apply(uow, old, values)
        return dataclasses.replace(new, type_id=type_id, details=details, version=old.version + 1)

    def validate(self, uow: UnitOfWork, new: PostureCheck, old: PostureCheck | None) -> None:
        if not new.name:
            raise FieldError("name", "name in body is required")

    def after_delete(self, uow: UnitOfWork, entity: PostureCheck) -> None:
        remove_entity_references(uow, entity, self.env.clock)


# -- the built-in posture check types (GET /posture-check-types) -------------------------------


@dataclass(kw_only=True)
class PostureCheckType(Entity):
    """A built-in posture check type; not stored (a fixed catalogue, as OpenZiti's migrations seed)."""

    ENTITY = "posture-check-types"

    name: str
    operating_systems: list[dict[str, Any]]


def _os(os_type: str, *versions: str) -> dict[str, Any]:
    return {"type": os_type, "versions": list(versions)}


# OpenZiti's db migrations (``addPostureCheckTypes``, ``addProcessMultiPostureCheck``); the
# operating systems are listed in the byte order of their type names, as its per-type buckets are.
_WINDOWS = _os("Windows", "Vista", "7", "8", "10", "2000")
_LINUX = _os("Linux", "4.14", "4.19", "5.4", "5.9")
_ANDROID = _os("Android", "9", "10", "11")
_IOS = _os("iOS", "11", "12")
_MACOS = _os("macOS", "10.15", "11.0")

BUILTIN_TYPES: list[tuple[str, str, list[dict[str, Any]]]] = [
    (DOMAIN, "Windows Domain Check", [_WINDOWS]),
    (MAC, "MAC Address Check", [_ANDROID, _LINUX, _WINDOWS, _MACOS]),
    (MFA, "MFA Check", []),
    (OS, "Operating System Check", [_ANDROID, _LINUX, _WINDOWS, _IOS, _MACOS]),
    (PROCESS, "Process Check", [_LINUX, _WINDOWS, _MACOS]),
    (PROCESS_MULTI, "Process Multi Check", [_os("Linux"), _os("Windows"), _os("macOS")]),
]
