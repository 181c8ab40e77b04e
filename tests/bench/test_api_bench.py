"""pytest-benchmark cases for API paths the PKI issue touched (``make bench`` times them).

- Listing 300 identities that each hold an ``ott`` enrollment: the JWT is signed once at creation
  and stored, so rendering signs nothing (before, every render signed a JWT: 91 ms for 300).
- An ``ott`` enrollment end to end (CSR in, certificate out) through the Falcon app.

In the normal suite ``--benchmark-disable`` runs each body once, untimed. No timing is asserted.
"""

from __future__ import annotations

from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from tests.api.certs import csr_pem, new_key
from tests.conftest import CLIENT, Api

pytestmark = pytest.mark.bench


def test_list_300_identities_with_enrollment_jwts(benchmark: BenchmarkFixture, api: Api) -> None:
    for n in range(300):
        api.create(
            "/identities",
            {"name": f"device-{n}", "type": "Device", "isAdmin": False, "enrollment": {"ott": True}},
        )

    def listing() -> Any:
        return api.get("/identities", params={"limit": 500}).json

    body = benchmark(listing)
    assert sum(1 for i in body["data"] if i["enrollment"].get("ott", {}).get("jwt")) == 300


def test_ott_enrollment(benchmark: BenchmarkFixture, api: Api) -> None:
    csr = csr_pem(new_key())
    counter = iter(range(10_000))

    def enroll() -> int:
        n = next(counter)
        identity = api.create(
            "/identities",
            {"name": f"enrollee-{n}", "type": "Device", "isAdmin": False, "enrollment": {"ott": True}},
        )
        token = api.get(f"/identities/{identity}").json["data"]["enrollment"]["ott"]["token"]
        result = api.post("/enroll/ott", base=CLIENT, json={"token": token, "clientCsr": csr})
        return int(result.status_code)

    assert benchmark.pedantic(enroll, rounds=20, iterations=1) == 200
