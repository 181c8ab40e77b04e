"""Posture data as JSON for the other processes of a shared store (engine/managers/posture/sharing.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from engine.managers.posture._core import (
    DomainData,
    FailedServiceRequest,
    MacData,
    OsData,
    PostureData,
    ProcessData,
    SessionPostureData,
)
from engine.managers.posture.sharing import export_data, import_data

T0 = datetime(2026, 3, 4, 5, 6, 7, 8000, tzinfo=UTC)


def test_what_is_shared_reads_back_as_it_was_less_the_refused_requests() -> None:
    data = PostureData(
        os=OsData("Windows", "10.0.19041", "1", "os-check", T0),
        domain=DomainData("corp", "d-check", T0, timed_out=True),
        mac=MacData(["aa:bb:cc:dd:ee:ff"], "m-check", T0),
        processes={"p": ProcessData("p", "/bin/x", True, "ab" * 32, ["cd" * 20], T0)},
        process_paths={"/bin/x": ProcessData("p", "/bin/x", True)},
        api_sessions={"as1": SessionPostureData(None, T0, None, {"type": "ziti-sdk-c"})},
        failures=[FailedServiceRequest(T0, "as1", "s", "svc", "Dial", ())],
    )

    shared = json.loads(json.dumps(export_data(data)))  # as the database hands it back
    again = import_data(shared)

    assert again.failures == []
    again.failures = data.failures
    assert again == data


@pytest.mark.parametrize(
    "state",
    [
        {"os": "Windows"},
        {"os": {"last_updated_at": {"$t": "2026-03-04T05:06:07"}}},  # no time zone
        {"processes": {"p": {"path": "/x"}}},  # a process report without its check id
    ],
)
def test_a_state_that_is_not_posture_data_is_refused(state: dict[str, object]) -> None:
    with pytest.raises((TypeError, ValueError)):
        import_data(state)
