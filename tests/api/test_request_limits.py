"""Request limits: bodies over 1 MiB are 413 on both paths (the serving worker and the app; declared,
chunked and undeclared lengths), and a request past its time budget is 503 ``TIMEOUT``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import pytest

from api.limits import CHECK_EVERY, Deadline, within_deadline
from controller.settings import Settings
from controller.worker import Connection, HttpError, Limits, TrellisWorker, parse_head
from engine.errors import RequestTimeoutError
from tests.api.certs import unique
from tests.conftest import Api

MIB = 1024 * 1024
TIMEOUT_MESSAGE = "The requested operation took too much time to reply"


def padded_service(size: int) -> bytes:
    """A valid service create of exactly ``size`` bytes (JSON padded with spaces)."""
    doc = b'{"name": "%s", "encryptionRequired": true}' % unique("svc").encode()
    return doc[:-1] + b" " * (size - len(doc)) + b"}"


def assert_too_large(result: Any) -> None:
    assert result.status_code == 413, result.text
    assert result.json["error"]["code"] == "REQUEST_ENTITY_TOO_LARGE"
    assert result.json["error"]["requestId"]


# -- 413 in the app (Falcon) -----------------------------------------------------------------------
def test_the_default_body_limit_is_1_mib() -> None:
    assert Settings().max_body_bytes == MIB
    assert Settings.from_env({}).max_body_bytes == MIB


def test_a_declared_body_over_1_mib_is_413(api: Api) -> None:
    result = api.post("/services", body=padded_service(MIB + 1), headers={"Content-Type": "application/json"})

    assert_too_large(result)


def test_a_body_of_exactly_1_mib_is_read(api: Api) -> None:
    result = api.post("/services", body=padded_service(MIB), headers={"Content-Type": "application/json"})

    assert result.status_code == 201, result.text


# A chunked body handed on undecoded by a WSGI server: no CONTENT_LENGTH, wsgi.input_terminated.
UNDECLARED = {"CONTENT_LENGTH": "", "wsgi.input_terminated": True}


def test_a_body_of_undeclared_length_is_read(api: Api) -> None:
    result = api.post(
        "/services",
        body=padded_service(300),
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        extras=UNDECLARED,
    )

    assert result.status_code == 201, result.text


def test_a_body_of_undeclared_length_over_1_mib_is_413(api: Api) -> None:
    result = api.post(
        "/services",
        body=padded_service(MIB + 1),
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        extras=UNDECLARED,
    )

    assert_too_large(result)


def test_the_limit_is_a_setting(make_api: Callable[..., Api]) -> None:
    api = make_api(max_body_bytes=1000)

    over = api.post("/services", body=padded_service(1001), headers={"Content-Type": "application/json"})
    within = api.post("/services", body=padded_service(1000), headers={"Content-Type": "application/json"})

    assert_too_large(over)
    assert within.status_code == 201


# -- 413 in the serving worker, before the app ----------------------------------------------------
def worker_read_body(head: bytes, sent: bytes, limit: int = MIB) -> bytes:
    """What the worker's body reader makes of ``sent`` after ``head`` (the whole input at once)."""
    limits = Limits(max_body_bytes=limit)
    loop = asyncio.new_event_loop()
    try:
        conn = Connection(loop, tls=False)
        conn.data_received(sent)
        conn.eof_received()
        worker = cast(Any, SimpleNamespace(loop=loop, limits=limits))
        return loop.run_until_complete(TrellisWorker._read_body(worker, conn, parse_head(head, limits)))
    finally:
        loop.close()


def chunked(body: bytes, size: int = 65536) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


HEAD = b"POST /edge/management/v1/services HTTP/1.1\r\nHost: h\r\n"


def test_the_worker_refuses_a_declared_length_over_the_limit_before_reading() -> None:
    with pytest.raises(HttpError) as refused:
        worker_read_body(HEAD + b"Content-Length: %d\r\n\r\n" % (MIB + 1), b"")

    assert (refused.value.status, refused.value.code) == (413, "REQUEST_ENTITY_TOO_LARGE")


def test_the_worker_refuses_a_chunked_body_growing_over_the_limit() -> None:
    with pytest.raises(HttpError) as refused:
        worker_read_body(HEAD + b"Transfer-Encoding: chunked\r\n\r\n", chunked(b"x" * (MIB + 1)))

    assert (refused.value.status, refused.value.code) == (413, "REQUEST_ENTITY_TOO_LARGE")


def test_the_worker_reads_a_chunked_body_of_exactly_the_limit() -> None:
    body = b"y" * MIB

    assert worker_read_body(HEAD + b"Transfer-Encoding: chunked\r\n\r\n", chunked(body)) == body


def test_the_worker_takes_its_body_limit_from_settings() -> None:
    from controller.serve import serving_limits

    assert serving_limits(Settings(max_body_bytes=4096)).max_body_bytes == 4096


# -- the time budget -------------------------------------------------------------------------------
def many_identities(api: Api, count: int) -> None:
    for _ in range(count):
        api.create("/identities", {"name": unique("id"), "type": "Default", "isAdmin": False})


def assert_timeout(result: Any) -> None:
    assert result.status_code == 503, result.text
    error = result.json["error"]
    assert (error["code"], error["message"]) == ("TIMEOUT", TIMEOUT_MESSAGE)
    assert error["requestId"]


def test_a_list_past_its_time_budget_is_503_timeout(make_api: Callable[..., Api]) -> None:
    api = make_api(request_timeout=1e-9)  # runs out at once: every check fails
    many_identities(api, 300)

    result = api.get("/identities", params={"limit": "-1"})

    assert_timeout(result)


def test_a_filter_past_its_time_budget_is_503_timeout(make_api: Callable[..., Api]) -> None:
    api = make_api(request_timeout=1e-9)
    many_identities(api, 300)

    result = api.get("/identities", params={"filter": 'name contains "id-"'})

    assert_timeout(result)


def test_writes_never_stop_half_way(make_api: Callable[..., Api]) -> None:
    api = make_api(request_timeout=1e-9)

    result = api.post("/services", json={"name": unique("svc"), "encryptionRequired": True})

    assert result.status_code == 201
    assert api.ctrl.managers.services.get(result.json["data"]["id"]) is not None


def test_a_big_list_within_the_budget_is_answered(make_api: Callable[..., Api]) -> None:
    api = make_api()
    many_identities(api, 300)

    result = api.get("/identities", params={"limit": "-1", "filter": 'name contains "id-"'})

    assert result.status_code == 200
    assert len(result.json["data"]) == 300


def test_a_zero_time_budget_means_none(make_api: Callable[..., Api]) -> None:
    api = make_api(request_timeout=0)
    many_identities(api, 100)

    result = api.get("/identities", params={"limit": "-1"})

    assert result.status_code == 200
    assert result.json["meta"]["pagination"]["totalCount"] == 101


def test_a_deadline_is_checked_on_the_first_item_and_every_so_often() -> None:
    now = [0.0]
    calls = [0]

    def monotonic() -> float:
        calls[0] += 1
        return now[0]

    deadline = Deadline(10.0, monotonic)
    req = SimpleNamespace(context=SimpleNamespace(deadline=deadline))
    seen: list[int] = []

    def consume() -> None:
        for item in within_deadline(cast(Any, req), range(1000)):
            seen.append(item)
            if item == 100:
                now[0] = 10.0

    with pytest.raises(RequestTimeoutError):
        consume()

    assert len(seen) == 2 * CHECK_EVERY  # the next check after the clock moved past the deadline
    assert calls[0] == 1 + 3  # the deadline's start, then items 0, 64 and 128


def test_the_time_budget_comes_from_the_environment() -> None:
    assert Settings.from_env({}).request_timeout == 30.0
    assert Settings.from_env({"TRELLIS_REQUEST_TIMEOUT_SECONDS": "2.5"}).request_timeout == 2.5
    assert Settings.from_env({"TRELLIS_REQUEST_TIMEOUT_SECONDS": "0"}).request_timeout == 0
    with pytest.raises(SystemExit, match="TRELLIS_REQUEST_TIMEOUT_SECONDS"):
        Settings.from_env({"TRELLIS_REQUEST_TIMEOUT_SECONDS": "-1"})
