"""The write path without HTTP: the same cycle of writes as ``bench writes``, through the managers.

``python -m bench writes --path store`` opens the controller in this process (``create_app`` on
a fresh ``trellis init`` home: the DuckDB store with its group commit, the policy engine, the
listeners) and has 1, 8 and 32 threads call the use cases the HTTP resources call, each answered
only after its batch is durable and published. What it measures is the write path itself
(staging, the batch's DuckDB transaction and change log, publishing, the engine's update); the
HTTP figures add parsing, TLS and the server on the same two cores.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.app import create_app
from controller.settings import Settings
from engine.entities.identities import ApiSession
from engine.errors import ControllerError
from engine.managers.registry import Managers


@dataclass
class StoreWorld:
    """Per writer: a service to patch and a device API session; shared: a config type and a Dial
    service the device may dial through an edge router."""

    managers: Managers
    config_type: str
    dial_service: str
    services: list[str]
    api_sessions: list[ApiSession]


def set_up_store(managers: Managers, writers: int, role: str, password: str) -> StoreWorld:
    m = managers
    config_type = m.config_types.create({"name": "bench.writepath.v1", "schema": {"type": "object"}})
    device = m.identities.create({"name": "bench-path-device", "is_admin": False, "role_attributes": [role]})
    authenticator = m.authenticators.create(
        {"identity_id": device.id, "method": "updb", "username": device.name, "password": password}
    )
    dial = m.services.create(
        {"name": "bench-path-dial", "encryption_required": True, "role_attributes": [role]}
    )
    roles = [f"#{role}"]
    m.service_policies.create(
        {
            "name": "bench-path-dial",
            "type": "Dial",
            "semantic": "AnyOf",
            "identity_roles": roles,
            "service_roles": roles,
        }
    )
    m.edge_routers.create({"name": "bench-path-er", "role_attributes": [role]})
    m.edge_router_policies.create(
        {"name": "bench-path-erp", "semantic": "AnyOf", "identity_roles": roles, "edge_router_roles": roles}
    )
    m.service_edge_router_policies.create(
        {"name": "bench-path-serp", "semantic": "AnyOf", "service_roles": roles, "edge_router_roles": roles}
    )
    services = [
        m.services.create(
            {"name": f"bench-path-{i}", "encryption_required": True, "role_attributes": ["a"]}
        ).id
        for i in range(writers)
    ]
    sessions = [
        m.api_sessions.start(device, authenticator, ip_address="127.0.0.1", config_types=[])[0]
        for _ in range(writers)
    ]
    return StoreWorld(m, config_type.id, dial.id, services, sessions)


def store_write_loop(
    world: StoreWorld,
    label: str,
    index: int,
    deadline: float,
    record: Callable[[str, float, bool], None],
) -> None:
    """The cycle of six writes through the managers until ``deadline``."""
    m = world.managers
    service, api_session = world.services[index], world.api_sessions[index]
    device = m.identities.require(api_session.identity_id)
    n = 0
    while time.monotonic() < deadline:
        n += 1
        name = f"bench-{label}-{index}-{n}"
        roles = ["a" if n % 2 else "b", f"w{index}"]
        steps: tuple[tuple[str, Callable[..., Any], tuple[Any, ...]], ...] = (
            ("create identity", m.identities.create, ({"name": name, "is_admin": False},)),
            ("patch service", m.services.update, (service, {"role_attributes": roles})),
            (
                "create config",
                m.configs.create,
                ({"name": name, "config_type_id": world.config_type, "data": {"n": n}},),
            ),
            ("create session", m.sessions.open, (api_session, world.dial_service, "Dial")),
        )
        for operation, step, args in steps:
            if time.monotonic() >= deadline:
                return
            started = time.perf_counter()
            try:
                created = step(*args)
            except ControllerError:
                record(operation, started, False)
                continue
            record(operation, started, True)
            if operation == "create config":
                started = time.perf_counter()
                m.configs.delete(created.id)
                record("delete config", started, True)
            elif operation == "create session":
                started = time.perf_counter()
                m.sessions.delete_for(device, created.session.id)
                record("delete session", started, True)


def measure_store(
    world: StoreWorld, writers: int, seconds: float
) -> tuple[float, list[float], Counter[str], Counter[str]]:
    """(elapsed, latencies in s, acknowledged per operation, errors per operation)."""
    lock = threading.Lock()
    latencies: list[float] = []
    acknowledged: Counter[str] = Counter()
    errors: Counter[str] = Counter()

    def record(operation: str, started: float, ok: bool) -> None:
        took = time.perf_counter() - started
        with lock:
            latencies.append(took)
            (acknowledged if ok else errors)[operation] += 1

    start = time.monotonic()
    deadline = start + seconds
    threads = [
        threading.Thread(
            target=store_write_loop, args=(world, f"p{writers}", i, deadline, record), daemon=True
        )
        for i in range(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()) + 120)
    return time.monotonic() - start, latencies, acknowledged, errors


def open_controller(home: Path) -> Any:
    """The app over an initialised home, in this process."""
    return create_app(Settings(home=home, bind="127.0.0.1:1280"))
