"""What the request path keeps or computes once instead of per request gives the same answers as
computing afresh: the expiry header's time stamp and the access log's redaction of a query."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from api.wire import _rfc3339, ts_fresh
from controller.accesslog import REDACTED, redact_query


def test_ts_fresh_writes_what_ts_writes() -> None:
    rng = random.Random(7)
    start = datetime(2026, 11, 29, 23, 59, 58, tzinfo=UTC)
    values = [start + timedelta(microseconds=137 * i) for i in range(30_000)]  # across seconds, days
    values += [
        datetime.fromtimestamp(rng.uniform(-3e9, 4e9), timezone(timedelta(hours=rng.randint(-12, 12))))
        for _ in range(5_000)
    ]
    values += [datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)]
    for value in values:
        assert ts_fresh(value) == _rfc3339.__wrapped__(value), value


@pytest.mark.parametrize(
    ("query", "logged"),
    [
        ("limit=25&offset=50", "limit=25&offset=50"),
        ("limit=25&token=abc", f"limit=25&token={REDACTED}"),
        ("Access_Token=abc&limit=1", f"Access_Token={REDACTED}&limit=1"),
        ("fil%74er=token%3D%22x%22", f"fil%74er={REDACTED}"),
        ("+Filter+=jwt", f"+Filter+={REDACTED}"),
        ("filter=name%3D%22x%22", "filter=name%3D%22x%22"),
        ("x" * 100 + "token=abc", "x" * 100 + f"token={REDACTED}"),  # a long name: not kept
        ("x" * 100 + "=abc", "x" * 100 + "=abc"),
    ],
)
def test_redaction_is_the_same_asked_again(query: str, logged: str) -> None:
    for _ in range(3):  # the first time decides a name's kind, later ones reuse it
        assert redact_query(query) == logged
