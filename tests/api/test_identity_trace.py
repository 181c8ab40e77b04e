"""``PUT /identities/{id}/trace``: data-flow tracing switched on for a Go duration, and off."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app

START = datetime(2026, 3, 1, 8, 0, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def api(settings: Settings, clock: FixedClock) -> Iterator[Api]:
    app = open_app(settings, clock=clock)
    create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    client = Api(app)
    client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
    yield client
    app.ctrl.env.store.close()


def new_identity(api: Api, name: str = "traced") -> str:
    return api.create("/identities", {"name": name, "isAdmin": False, "type": "User"})


def trace(api: Api, identity_id: str, body: dict[str, Any]) -> Any:
    return api.put(f"/identities/{identity_id}/trace", json=body)


def test_enabling_answers_the_trace_id_and_until(api: Api) -> None:
    identity_id = new_identity(api)

    result = trace(api, identity_id, {"enabled": True, "duration": "1h30m", "traceId": "t-1"})

    assert result.status_code == 200
    assert result.json["data"] == {"enabled": True, "traceId": "t-1", "until": "2026-03-01T09:30:00.000Z"}
    assert "apiVersion" in result.json["meta"]


def test_enabling_without_a_trace_id_issues_a_uuid(api: Api) -> None:
    identity_id = new_identity(api)

    result = trace(api, identity_id, {"enabled": True, "duration": "90s", "channels": ["all"]})

    assert result.status_code == 200
    trace_id = result.json["data"]["traceId"]
    assert str(uuid.UUID(trace_id)) == trace_id
    assert result.json["data"]["until"] == "2026-03-01T08:01:30.000Z"


def test_the_trace_is_recorded_for_the_identity(api: Api, clock: FixedClock) -> None:
    identity_id = new_identity(api)
    traces = api.ctrl.managers.identity_traces

    trace(api, identity_id, {"enabled": True, "duration": "10m", "traceId": "t-2", "channels": ["x"]})

    recorded = traces.active(identity_id)
    assert recorded is not None
    assert (recorded.trace_id, recorded.channels) == ("t-2", ("x",))
    clock.advance(minutes=10)
    assert traces.active(identity_id) is None


def test_no_channels_means_select_and_establish_path(api: Api) -> None:
    identity_id = new_identity(api)

    trace(api, identity_id, {"enabled": True, "duration": "1m"})

    recorded = api.ctrl.managers.identity_traces.active(identity_id)
    assert recorded is not None
    assert recorded.channels == ("select-path", "establish-path")


def test_disabling_answers_a_disabled_detail_and_forgets_the_trace(api: Api) -> None:
    identity_id = new_identity(api)
    trace(api, identity_id, {"enabled": True, "duration": "5m"})

    result = trace(api, identity_id, {"enabled": False})

    assert result.status_code == 200
    assert result.json["data"] == {"enabled": False}
    assert api.ctrl.managers.identity_traces.active(identity_id) is None


@pytest.mark.parametrize(
    ("duration", "reason"),
    [
        ("", 'time: invalid duration ""'),
        ("ten minutes", 'time: invalid duration "ten minutes"'),
        ("5", 'time: missing unit in duration "5"'),
        ("5x", 'time: unknown unit "x" in duration "5x"'),
    ],
)
def test_an_unparsable_duration_is_a_field_error(api: Api, duration: str, reason: str) -> None:
    identity_id = new_identity(api)

    result = trace(api, identity_id, {"enabled": True, "duration": duration})

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == "duration"
    assert result.json["error"]["cause"]["reason"] == reason
    assert api.ctrl.managers.identity_traces.active(identity_id) is None


@pytest.mark.parametrize("body", [{"enabled": True, "duration": "1m"}, {"enabled": False}])
def test_unknown_identity_is_404(api: Api, body: dict[str, Any]) -> None:
    result = trace(api, "no-such-identity", body)

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"


def test_a_wrongly_typed_field_is_refused(api: Api) -> None:
    result = trace(api, new_identity(api), {"enabled": "yes", "duration": "1m"})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "enabled"


def test_a_body_is_required(api: Api) -> None:
    result = api.put(f"/identities/{new_identity(api)}/trace")

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_PARSE_BODY"


def test_tracing_needs_an_admin(api: Api) -> None:
    identity_id = new_identity(api)
    api.create(
        "/authenticators",
        {"identityId": identity_id, "method": "updb", "username": "tracer", "password": "secret-pass-1"},
    )
    token = api.login("tracer", "secret-pass-1", base=CLIENT)

    result = api.put(
        f"/identities/{identity_id}/trace", json={"enabled": True, "duration": "1m"}, token=token
    )

    assert result.status_code == 401


def test_post_is_not_an_operation_of_the_trace(api: Api) -> None:
    result = api.post(f"/identities/{new_identity(api)}/trace", json={"enabled": True, "duration": "1m"})

    assert result.status_code == 405


def test_a_deleted_identity_has_no_trace(api: Api) -> None:
    identity_id = new_identity(api, "short-lived")
    trace(api, identity_id, {"enabled": True, "duration": "1h"})

    assert api.delete(f"/identities/{identity_id}").status_code == 200

    assert api.ctrl.managers.identity_traces.active(identity_id) is None
