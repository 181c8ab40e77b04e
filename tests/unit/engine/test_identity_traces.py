"""Go ``time.ParseDuration`` syntax, as the identity trace reads its ``duration``."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from engine.managers.identity_traces import parse_go_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", timedelta(0)),
        ("300ms", timedelta(milliseconds=300)),
        ("90s", timedelta(seconds=90)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        (".5s", timedelta(milliseconds=500)),
        ("1.s", timedelta(seconds=1)),
        ("2h45m30.5s", timedelta(hours=2, minutes=45, seconds=30, milliseconds=500)),
        ("1500us", timedelta(microseconds=1500)),
        ("1500\u00b5s", timedelta(microseconds=1500)),
        ("1500\u03bcs", timedelta(microseconds=1500)),
        ("2000ns", timedelta(microseconds=2)),
        ("+5m", timedelta(minutes=5)),
        ("-5m", timedelta(minutes=-5)),
    ],
)
def test_valid_durations(text: str, expected: timedelta) -> None:
    assert parse_go_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("-", 'time: invalid duration "-"'),
        (".", 'time: invalid duration "."'),
        ("m", 'time: invalid duration "m"'),
        ("5", 'time: missing unit in duration "5"'),
        ("1h5", 'time: missing unit in duration "1h5"'),
        ("5d", 'time: unknown unit "d" in duration "5d"'),
        ("5 m", 'time: unknown unit " m" in duration "5 m"'),
        ("9999999999999h", 'time: invalid duration "9999999999999h"'),
    ],
)
def test_invalid_durations_carry_go_messages(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_go_duration(text)
