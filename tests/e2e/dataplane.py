"""What the data-plane end-to-end tests share: the real SDK's venv, a network of identities the
real SDK enrolled, services with Dial and Bind policies, background Binders, Dialers, and routers
run as their own processes (``trellis router enroll`` and ``run``), as on another host.

Failure messages carry the SDK drivers' output (``ZITI_LOG=4``), the server's log (the embedded
router's included) and a standalone router's log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.sdk.sdk_venv import DRIVERS, LOCK_TIMEOUT, SKIP_ENV, SdkVenvError, clean_env, ensure_sdk_python
from tests.e2e.server import HOST, MGMT, ROOT, TRELLIS, Server, tail
from tests.e2e.test_sdk import DriverRun, run_driver


def sdk_marks(seconds: float) -> list[pytest.MarkDecorator]:
    """The marks of a module that runs the real SDK: its tests may take ``seconds`` once the
    SDK's venv is there (the first set-up may build it)."""
    return [
        pytest.mark.e2e,
        pytest.mark.timeout(LOCK_TIMEOUT + seconds),
        pytest.mark.skipif(
            os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes"),
            reason=f"{SKIP_ENV} is set: real OpenZiti SDK e2e tests skipped on purpose",
        ),
    ]


EMBEDDED = "trellis-router"
ONLINE_TIMEOUT = 30.0
ENROLL_TIMEOUT = 45.0
BIND_TIMEOUT = 30.0
DIAL_TIMEOUT = 60.0
PAYLOAD = 100_000


def find_sdk_python() -> Path:
    """The SDK venv's python (a fixture's body: fails, never skips, when it cannot be built)."""
    try:
        return ensure_sdk_python()
    except SdkVenvError as exc:
        problem = str(exc)
    pytest.fail(f"cannot provide the real OpenZiti SDK: {problem}", pytrace=False)


@dataclass
class Network:
    server: Server
    admin: str
    workdir: Path
    python: Path
    router_id: str
    identities: dict[str, Path] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    services: dict[str, str] = field(default_factory=dict)

    def call(self, method: str, path: str, status: int, what: str, **kwargs: Any) -> dict[str, Any]:
        return self.server.expect(
            self.server.call(method, f"{MGMT}{path}", self.admin, **kwargs), status, what
        )

    def router(self, router_id: str | None = None) -> dict[str, Any]:
        """The edge router ``router_id`` (this network's own by default)."""
        wanted = router_id or self.router_id
        return self.call("GET", f"/edge-routers/{wanted}", 200, "read a router")["data"]

    def enroll_sdks(self, names: Iterable[str] = ("dialer", "binder")) -> None:
        """Identities ``names``, each enrolled by the real SDK into ``workdir/<name>.json``."""
        for name in names:
            created = self.call(
                "POST",
                "/identities",
                201,
                f"create {name}",
                json={"name": name, "type": "Device", "isAdmin": False, "enrollment": {"ott": True}},
            )
            identity_id = created["data"]["id"]
            detail = self.call("GET", f"/identities/{identity_id}", 200, f"read {name}")
            jwt_file = self.workdir / f"{name}.jwt"
            jwt_file.write_text(detail["data"]["enrollment"]["ott"]["jwt"])
            identity_file = self.workdir / f"{name}.json"
            run = run_driver(
                self.python,
                "enroll_driver.py",
                [str(jwt_file), str(identity_file)],
                self.workdir,
                f"enroll-{name}",
                ENROLL_TIMEOUT,
            )
            assert run.returncode == 0, self.explain(run)
            assert identity_file.is_file(), self.explain(run)
            self.identities[name], self.ids[name] = identity_file, identity_id

    def echo_services(self, encrypted: dict[str, bool]) -> None:
        """Services (name -> ``encryptionRequired``) the ``dialer`` may Dial and the ``binder``
        Bind (policies ``dial-echo`` and ``bind-echo``)."""
        for name, required in encrypted.items():
            created = self.call(
                "POST",
                "/services",
                201,
                f"create {name}",
                json={"name": name, "encryptionRequired": required},
            )
            self.services[name] = created["data"]["id"]
        self.service_policy("dial-echo", "Dial", "dialer")
        self.service_policy("bind-echo", "Bind", "binder")

    def service_policy(self, name: str, kind: str, who: str) -> None:
        """``who`` may ``kind`` (Dial, Bind) every service of this network."""
        self.call(
            "POST",
            "/service-policies",
            201,
            f"create {name}",
            json={
                "name": name,
                "type": kind,
                "semantic": "AnyOf",
                "identityRoles": [f"@{self.ids[who]}"],
                "serviceRoles": [f"@{sid}" for sid in self.services.values()],
            },
        )

    def explain(self, *runs: DriverRun | Path) -> str:
        parts = []
        for run in runs:
            if isinstance(run, Path):
                parts.append(f"--- {run.name}:\n{tail(run.read_text(errors='replace'), 6000)}")
            else:
                parts.append(run.report())
        return "\n".join([*parts, self.server.log_tail()])


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


class Binder:
    """A Binder driver running in the background."""

    def __init__(self, net: Network, service: str, connections: int = 1) -> None:
        self.out = net.workdir / f"bind-{service}-{time.monotonic_ns()}.stdout"
        self.err = self.out.with_suffix(".stderr")
        with self.out.open("wb") as stdout, self.err.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [
                    str(net.python),
                    str(DRIVERS / "bind_driver.py"),
                    str(net.identities["binder"]),
                    service,
                    str(connections),
                ],
                cwd=net.workdir,
                env=clean_env(ZITI_LOG="4"),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )

    def lines(self) -> list[str]:
        return self.out.read_text(errors="replace").splitlines()

    def line(self, prefix: str) -> str:
        return next((ln for ln in self.lines() if ln.startswith(prefix)), "")

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def terminators_of(net: Network, service: str) -> list[dict[str, Any]]:
    sid = net.services[service]
    return net.call("GET", "/terminators", 200, "list terminators", params={"filter": f'service="{sid}"'})[
        "data"
    ]


def dial(net: Network, service: str, size: int = PAYLOAD, dials: int = 1) -> DriverRun:
    return run_driver(
        net.python,
        "dial_driver.py",
        [str(net.identities["dialer"]), service, str(size), str(dials)],
        net.workdir,
        f"dial-{service}-{time.monotonic_ns()}",
        DIAL_TIMEOUT,
    )


def bound(net: Network, binder: Binder, service: str) -> None:
    """Wait until ``binder`` listens and the controller shows its terminator."""
    wait_for(lambda: binder.line("BOUND") or binder.proc.poll() is not None, BIND_TIMEOUT, "the binder binds")
    assert binder.line("BOUND"), net.explain(binder.out, binder.err)
    wait_for(lambda: terminators_of(net, service), 10, f"the bind's terminator of {service} appears")


class RouterProcess:
    """A standalone router: made in the management API, enrolled with ``trellis router enroll``
    into ``directory`` and run with ``trellis router run``, as on another host."""

    def __init__(self, net: Network, name: str, directory: Path, **fields: Any) -> None:
        self.net, self.name, self.directory = net, name, directory
        self.log = directory.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None
        created = net.call("POST", "/edge-routers", 201, f"create {name}", json={"name": name, **fields})
        self.id: str = created["data"]["id"]
        jwt_file = net.workdir / f"{name}.jwt"
        jwt_file.write_text(net.router(self.id)["enrollmentJwt"])
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
        self.env.update(
            {"TRELLIS_ROUTER_HOME": str(directory), "TRELLIS_ROUTER_CTRL": f"{HOST}:{net.server.ctrl_port}"}
        )
        self.enrolled = subprocess.run(
            [*TRELLIS, "router", "enroll", str(jwt_file)],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert self.enrolled.returncode == 0, self.enrolled.stderr

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [*TRELLIS, "router", "run"],
                env=self.env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
            )

    def kill(self) -> None:
        """``kill -9``, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, limit: int = 6000) -> str:
        return f"--- router {self.name} log {self.log}:\n{tail(self.text(), limit)}"
