"""controller/settings.py: one declaration per variable, from which the defaults, the reader, the help
and the settings table of docs/operations.md all come."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from controller.settings import (
    BY_ENV,
    COMMANDS,
    SETTINGS,
    SettingError,
    Settings,
    describe,
    markdown,
    read_by,
    split_address,
)


def test_every_variable_is_declared_once_and_fills_a_field_of_its_own() -> None:
    names = [s.env for s in SETTINGS]
    fields = [s.field for s in SETTINGS if s.field is not None]
    known = {f.name for f in dataclasses.fields(Settings)}

    assert len(set(names)) == len(names)
    assert len(set(fields)) == len(fields)
    assert set(fields) <= known
    assert all(name.startswith("TRELLIS_") for name in names)
    assert all(set(s.commands) <= set(COMMANDS) and s.commands for s in SETTINGS)


def test_the_defaults_are_the_declared_ones() -> None:
    assert Settings.from_env({}) == Settings()
    assert Settings() == Settings.from_env({s.env: s.default for s in SETTINGS})
    assert Settings.from_env({s.env: "  " for s in SETTINGS}) == Settings()  # blank: unset
    defaults = Settings()
    assert (defaults.home, defaults.bind, defaults.threads) == (Path(".trellis"), "127.0.0.1:1280", 16)
    assert defaults.session_timeout == timedelta(minutes=30)
    assert (defaults.db_journal, defaults.jwks_allow_loopback) == (True, False)
    assert (defaults.mfa_free_failures, defaults.mfa_backoff, defaults.mfa_backoff_max) == (10, 30.0, 3600.0)


def test_values_are_parsed_into_their_fields() -> None:
    settings = Settings.from_env(
        {
            "TRELLIS_HOME": "/srv/trellis",
            "TRELLIS_BIND": "[::1]:8443",
            "TRELLIS_ADVERTISE": "ctrl.example.test:443",
            "TRELLIS_SAN": "ctrl.example.test, 10.0.0.1,*.example.test",
            "TRELLIS_SESSION_TIMEOUT_MINUTES": "5",
            "TRELLIS_THREADS": "256",
            "TRELLIS_TIMEOUT_KEEPALIVE_SECONDS": "0",
            "TRELLIS_DB_JOURNAL": "OFF",
            "TRELLIS_DB_WRITER": "thread",
            "TRELLIS_DB_MEMORY_LIMIT": "512 MiB",
            "TRELLIS_CERT_PROXIES": "10.0.0.0/8, 127.0.0.1",
        }
    )

    assert settings.home == Path("/srv/trellis")
    assert settings.bind == "[::1]:8443"
    assert settings.advertised_address == "ctrl.example.test:443"
    assert settings.sans == ("ctrl.example.test", "10.0.0.1", "*.example.test")
    assert settings.session_timeout == timedelta(minutes=5)
    assert (settings.threads, settings.keepalive_timeout) == (256, 0.0)
    assert (settings.db_journal, settings.db_writer, settings.db_memory_limit) == (False, "thread", "512 MiB")
    assert settings.cert_proxies == ("10.0.0.0/8", "127.0.0.1")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TRELLIS_THREADS", "257"),
        ("TRELLIS_THREADS", "1.5"),
        ("TRELLIS_THREADS", "١٢"),  # other scripts' digits
        ("TRELLIS_CHANGE_LOG_RETAIN", "0"),
        ("TRELLIS_RATE_WRITE_BURST", "0"),
        ("TRELLIS_PURGE_INTERVAL_SECONDS", "nan"),
        ("TRELLIS_POSTURE_INTERVAL_SECONDS", "1e12"),
        ("TRELLIS_BIND", ":1280"),
        ("TRELLIS_BIND", "127.0.0.1:0"),
        ("TRELLIS_BIND", "[nonsense]:1280"),
        ("TRELLIS_BIND", "unix:/tmp/trellis.sock"),
        ("TRELLIS_SAN", "-bad-.example"),
    ],
)
def test_a_value_not_of_its_form_names_the_variable_the_form_and_the_value(name: str, value: str) -> None:
    with pytest.raises(SettingError) as raised:
        Settings.from_env({name: value})

    message = str(raised.value)
    assert message.startswith(f"{name} must be {BY_ENV[name].form}, not {value!r}")
    assert "\n" not in message


def test_only_the_settings_a_command_reads_are_checked() -> None:
    bad = {"TRELLIS_THREADS": "many", "TRELLIS_HOME": "/srv/trellis"}

    assert Settings.from_env(bad, command="restore").home == Path("/srv/trellis")
    with pytest.raises(SettingError, match="TRELLIS_THREADS"):
        Settings.from_env(bad, command="serve")
    with pytest.raises(SettingError, match="TRELLIS_THREADS"):
        Settings.from_env(bad)


def test_addresses() -> None:
    assert split_address("127.0.0.1:1280") == ("127.0.0.1", 1280)
    assert split_address("localhost:65535") == ("localhost", 65535)
    assert split_address("[::]:1") == ("::", 1)


def test_the_help_and_the_table_come_from_the_declarations() -> None:
    table = markdown().splitlines()
    serve = describe("serve")

    assert table[:2] == ["| variable | default | meaning |", "| --- | --- | --- |"]
    assert len(table) == 2 + len(SETTINGS)
    assert "| `TRELLIS_THREADS` | `16` | threads running the app in the one worker" in markdown()
    assert all(f"  {s.env} (default: " in serve for s in read_by("serve"))
    assert "TRELLIS_ADMIN_PASSWORD" not in serve  # init's
    assert "`" not in describe()


def test_the_operations_guide_shows_the_generated_settings_table() -> None:
    """docs/operations.md §2 is ``python -m controller.settings --markdown`` (regenerate with it)."""
    from pathlib import Path

    from controller.settings import markdown

    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    begin = text.index("<!-- settings:begin")
    start = text.index("\n", begin) + 1
    end = text.index("<!-- settings:end -->")
    assert text[start:end].strip() == markdown().strip()
