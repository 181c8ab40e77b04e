"""An identity's posture data as JSON, for the other processes of a shared store.

Posture data lives in each process's memory (as OpenZiti keeps it, never in the database). With
several processes on one database an SDK's posture responses reach one of them, and its session
requests any: :class:`~engine.managers.posture.PostureManager` shares each identity's data, as
changed, on the store's :class:`~engine.ports.PostureBoard` and takes in the others'. What is
shared is what checks read: OS, domain, MAC, process reports, and per API session its endpoint
state and SDK information (MFA comes from the API session itself, the refused requests list stays
with the process that refused them).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from engine.managers.posture._core import (
    DomainData,
    MacData,
    OsData,
    PostureData,
    ProcessData,
    SessionPostureData,
)

PostureState = dict[str, Any]


def export_data(data: PostureData) -> PostureState:
    """``data`` as JSON (its ``failures`` left out)."""
    return {
        "os": _plain(data.os),
        "domain": _plain(data.domain),
        "mac": _plain(data.mac),
        "processes": {k: _plain(v) for k, v in data.processes.items()},
        "processPaths": {k: _plain(v) for k, v in data.process_paths.items()},
        "apiSessions": {k: _plain(v) for k, v in data.api_sessions.items()},
    }


def import_data(state: PostureState) -> PostureData:
    """What :func:`export_data` made, back (``ValueError``/``TypeError``/``KeyError`` if it is not)."""
    return PostureData(
        os=_typed(OsData, state.get("os") or {}),
        domain=_typed(DomainData, state.get("domain") or {}),
        mac=_typed(MacData, state.get("mac") or {}),
        processes={str(k): _typed(ProcessData, v) for k, v in (state.get("processes") or {}).items()},
        process_paths={str(k): _typed(ProcessData, v) for k, v in (state.get("processPaths") or {}).items()},
        api_sessions={
            str(k): _typed(SessionPostureData, v) for k, v in (state.get("apiSessions") or {}).items()
        },
    )


def _plain(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        out[f.name] = {"$t": item.isoformat()} if isinstance(item, datetime) else item
    return out


def _typed(cls: Any, doc: Any) -> Any:
    if not isinstance(doc, dict):
        raise TypeError(f"{cls.__name__}: not an object")
    names = {f.name for f in dataclasses.fields(cls)}
    fields: dict[str, Any] = {}
    for name, item in doc.items():
        if name not in names:
            continue  # a field of another version: left out
        if isinstance(item, dict) and set(item) == {"$t"}:
            moment = datetime.fromisoformat(str(item["$t"]))
            if moment.tzinfo is None:
                raise ValueError(f"{cls.__name__}.{name}: a time without a zone")
            item = moment
        fields[name] = item
    return cls(**fields)
