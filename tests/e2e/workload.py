"""Concurrent load on a real ``trellis serve``, for the crash test and the soak, and the checks run
after it.

A :class:`Worker` is one client thread with its own admin login and connections. It creates,
updates and deletes identities, services and service policies (each entity has one writer, so its
changes are ordered), logs in as the admin, logs a device in on the client API and opens a Dial
session; with ``reads`` it also lists with filters, reads details (which must show its own
acknowledged writes), asks policy advice and lists the device's services. It remembers every
write answered 2xx in its :class:`Ledger`; a change whose answer never came (the server was
killed meanwhile) is kept as ``pending``: it may or may not have happened. Every answer is counted
in a :class:`Tally`.

Afterwards :func:`audit` checks the ledgers against the server, :func:`engine_answers` and
:func:`graph_answers` put the engine's link sets next to a :class:`PolicyGraph` rebuilt from the
DuckDB file (:func:`rebuilt_graph`) or the PostgreSQL database (:func:`postgres_answers`), and :func:`integrity_results` runs the data integrity check.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

import requests

from engine.managers.access import build_graph
from engine.policy import EDGE_ROUTER, IDENTITY, SERVICE, PolicyGraph
from storage.duckdb import DuckDBStore
from storage.duckdb.journal import segments
from storage.postgres import PostgresStore
from tests.e2e.server import CLIENT, MGMT, Server

#: What the workers' role attributes and ``#`` roles are drawn from.
ATTRIBUTES = ("red", "green", "blue", "amber")
DEVICE_PASSWORD = "Correct-Horse-42"
DEVICE_ATTRIBUTE = "crash-device"
TARGET_ATTRIBUTE = "crash-target"
#: Rate budgets off, so that the load is never refused with 429.
NO_BUDGETS = {"TRELLIS_RATE_AUTH_PER_MINUTE": "0", "TRELLIS_RATE_WRITE_PER_MINUTE": "0"}
#: A request's own time limit (well above any answer's time, even on a busy machine).
REQUEST_TIMEOUT = 30.0
ALL = {"limit": "-1"}
#: A change whose answer never came: the entity may be gone.
DELETED: dict[str, Any] = {"deleted": True}


# -- what a worker writes -------------------------------------------------------------------------
def _attributes(rng: Random) -> list[str]:
    return sorted(rng.sample(ATTRIBUTES, rng.randint(1, 2)))


def _roles(rng: Random) -> list[str]:
    return [f"#{a}" for a in _attributes(rng)]


@dataclass(frozen=True)
class Kind:
    """An entity kind the workers write: its collection, a create body, an update body."""

    path: str
    create: Callable[[Random, str], dict[str, Any]]
    update: Callable[[Random], dict[str, Any]]
    #: The fields checked afterwards (lists compared as sorted).
    checked: tuple[str, ...]


KINDS = (
    Kind(
        "identities",
        lambda rng, name: {
            "name": name,
            "type": "User",
            "isAdmin": False,
            "roleAttributes": _attributes(rng),
        },
        lambda rng: {"roleAttributes": _attributes(rng)},
        ("name", "roleAttributes"),
    ),
    Kind(
        "services",
        lambda rng, name: {"name": name, "encryptionRequired": True, "roleAttributes": _attributes(rng)},
        lambda rng: {"roleAttributes": _attributes(rng)},
        ("name", "roleAttributes"),
    ),
    Kind(
        "service-policies",
        lambda rng, name: {
            "name": name,
            "type": rng.choice(("Dial", "Bind")),
            "semantic": "AnyOf",
            "identityRoles": _roles(rng),
            "serviceRoles": _roles(rng),
        },
        lambda rng: {"identityRoles": _roles(rng), "serviceRoles": _roles(rng)},
        ("name", "type", "identityRoles", "serviceRoles"),
    ),
)


def _checked(kind: Kind, fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: sorted(v) if isinstance(v, list) else v for k, v in fields.items() if k in kind.checked}


@dataclass
class Record:
    """An entity a worker created: its acknowledged fields, whether its deletion was acknowledged,
    and the change (fields, or :data:`DELETED`) whose answer never came, if any."""

    kind: Kind
    id: str
    fields: dict[str, Any]
    deleted: bool = False
    pending: dict[str, Any] | None = None

    def allowed(self) -> list[dict[str, Any] | None]:
        """The states the server may hold for it (None: absent)."""
        states: list[dict[str, Any] | None] = [None if self.deleted else self.fields]
        if self.pending is DELETED:
            states.append(None)
        elif self.pending is not None:
            states.append({**self.fields, **self.pending})
        return states


@dataclass
class Ledger:
    """One worker's acknowledged writes."""

    records: dict[str, Record] = field(default_factory=dict)
    #: API sessions and Dial sessions that must exist, and those ended by an acknowledged logout.
    api_sessions: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    writes: int = 0


# -- counting answers -----------------------------------------------------------------------------
class Tally:
    """Every answer's status, the requests that got no answer, and what went wrong (with the
    request and the start of the answer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statuses: Counter[int] = Counter()
        self.unanswered: list[str] = []
        self.wrong: list[str] = []
        self.acknowledged = 0

    def answered(self, method: str, path: str, response: requests.Response, expected: int) -> None:
        with self._lock:
            self.statuses[response.status_code] += 1
            if response.status_code != expected:
                self.wrong.append(
                    f"{method} {path} -> {response.status_code} (expected {expected}): {response.text[:300]}"
                )
            elif method != "GET":
                self.acknowledged += 1

    def lost(self, method: str, path: str, error: BaseException) -> None:
        with self._lock:
            self.unanswered.append(f"{method} {path}: {type(error).__name__}: {error}")

    def mismatch(self, what: str) -> None:
        with self._lock:
            self.wrong.append(what)

    def by_class(self) -> dict[str, int]:
        with self._lock:
            classes: Counter[str] = Counter()
            for status, count in self.statuses.items():
                classes[f"{status // 100}xx"] += count
            return dict(sorted(classes.items()))

    def server_errors(self) -> int:
        with self._lock:
            return sum(count for status, count in self.statuses.items() if status >= 500)

    def summary(self) -> str:
        classes = ", ".join(f"{name} {count}" for name, count in self.by_class().items())
        return (
            f"{sum(self.statuses.values())} requests answered ({classes}), {len(self.unanswered)} unanswered, "
            f"{self.acknowledged} writes acknowledged"
        )


# -- the fixed part of the world ------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    """An identity with a password that may Dial ``service`` over ``router`` (never touched by the
    workers' policies, whose roles use :data:`ATTRIBUTES` only)."""

    id: str
    name: str
    service: str
    router: str


def provision(server: Server, token: str) -> Device:
    """The device, its service, its Dial policy, an edge router and the router policies."""

    def create(path: str, body: dict[str, Any]) -> str:
        created = server.expect(
            server.call("POST", f"{MGMT}/{path}", token, json=body), 201, f"create {path}"
        )
        return str(created["data"]["id"])

    name = "crash-device"
    device = create(
        "identities",
        {
            "name": name,
            "type": "User",
            "isAdmin": False,
            "roleAttributes": [DEVICE_ATTRIBUTE],
            "enrollment": {"updb": name},
        },
    )
    detail = server.expect(server.call("GET", f"{MGMT}/identities/{device}", token), 200, "device detail")
    ott = detail["data"]["enrollment"]["updb"]["token"]
    enrolled = server.call(
        "POST", f"{CLIENT}/enroll/updb", params={"token": ott}, json={"password": DEVICE_PASSWORD}
    )
    server.expect(enrolled, 200, "device updb enrollment")
    service = create(
        "services", {"name": "crash-target", "encryptionRequired": True, "roleAttributes": [TARGET_ATTRIBUTE]}
    )
    roles = {"identityRoles": [f"#{DEVICE_ATTRIBUTE}"], "serviceRoles": [f"#{TARGET_ATTRIBUTE}"]}
    create("service-policies", {"name": "crash-dial", "type": "Dial", "semantic": "AnyOf", **roles})
    router = create("edge-routers", {"name": "crash-router", "roleAttributes": ["crash-edge"]})
    create(
        "edge-router-policies",
        {"name": "crash-erp", "semantic": "AnyOf", "identityRoles": ["#all"], "edgeRouterRoles": ["#all"]},
    )
    create(
        "service-edge-router-policies",
        {"name": "crash-serp", "semantic": "AnyOf", "serviceRoles": ["#all"], "edgeRouterRoles": ["#all"]},
    )
    return Device(device, name, service, router)


# -- the workers ----------------------------------------------------------------------------------
class Unanswered(Exception):
    """A request got no answer: the server is gone (or broken); the worker stops."""


class Worker:
    """One client thread (see the module docstring). ``reads`` is the share of its steps that read;
    ``cap`` bounds the live entities it keeps per kind."""

    def __init__(
        self,
        server: Server,
        index: int,
        rng: Random,
        tally: Tally,
        stop: threading.Event,
        device: Device,
        *,
        reads: float = 0.0,
        cap: int = 40,
    ) -> None:
        self.server = server
        self.index = index
        self.rng = rng
        self.tally = tally
        self.stop = stop
        self.device = device
        self.reads = reads
        self.cap = cap
        self.ledger = Ledger()
        self.http = server.session()
        self.token = ""
        self.device_token = ""
        self.created = 0
        #: An exception the thread ended with (other than a lost answer): the test fails on it.
        self.crashed: BaseException | None = None
        self.thread = threading.Thread(target=self.run, name=f"worker-{index}", daemon=True)

    # -- plumbing -----------------------------------------------------------------------------
    def send(
        self,
        method: str,
        path: str,
        expected: int,
        *,
        token: str | None = None,
        body: dict[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """One request; :class:`Unanswered` when no answer comes."""
        sent = self.token if token is None else token
        headers = {"zt-session": sent} if sent else {}
        try:
            response = self.http.request(
                method,
                self.server.url + path,
                headers=headers,
                json=body,
                params=params,
                timeout=REQUEST_TIMEOUT,
            )
        except requests.RequestException as exc:
            self.tally.lost(method, path, exc)
            raise Unanswered(f"{method} {path}") from exc
        self.tally.answered(method, path, response, expected)
        return response

    def live(self, kind: Kind) -> list[Record]:
        return [r for r in self.ledger.records.values() if r.kind is kind and not r.deleted]

    def start(self) -> None:
        self.thread.start()

    def run(self) -> None:
        try:
            self.admin_login()
            while not self.stop.is_set():
                if self.rng.random() < self.reads:
                    self.read()
                else:
                    self.write()
        except Unanswered:
            pass
        except BaseException as exc:  # reported by the test (a thread's exception would be a warning)
            self.crashed = exc
        finally:
            self.http.close()

    # -- writes -------------------------------------------------------------------------------
    def write(self) -> None:
        roll = self.rng.random()
        if roll < 0.03:
            self.admin_login()
        elif roll < 0.08:
            self.device_session()
        else:
            kind = self.rng.choice(KINDS)
            live = self.live(kind)
            roll = self.rng.random()
            if not live or (roll < 0.4 and len(live) < self.cap):
                self.create(kind)
            elif roll < 0.8:
                self.update(self.rng.choice(live))
            else:
                self.delete(self.rng.choice(live))

    def create(self, kind: Kind) -> None:
        self.created += 1
        body = kind.create(self.rng, f"w{self.index}-{kind.path}-{self.created}")
        response = self.send("POST", f"{MGMT}/{kind.path}", 201, body=body)
        if response.status_code == 201:
            entity_id = response.json()["data"]["id"]
            self.ledger.records[entity_id] = Record(kind, entity_id, _checked(kind, body))
            self.ledger.writes += 1

    def update(self, record: Record) -> None:
        change = _checked(record.kind, record.kind.update(self.rng))
        try:
            response = self.send("PATCH", f"{MGMT}/{record.kind.path}/{record.id}", 200, body=change)
        except Unanswered:
            record.pending = change
            raise
        if response.status_code == 200:
            record.fields.update(change)
            self.ledger.writes += 1
        elif response.status_code >= 500:
            record.pending = change

    def delete(self, record: Record) -> None:
        try:
            response = self.send("DELETE", f"{MGMT}/{record.kind.path}/{record.id}", 200)
        except Unanswered:
            record.pending = DELETED
            raise
        if response.status_code == 200:
            record.deleted = True
            self.ledger.writes += 1
        elif response.status_code >= 500:
            record.pending = DELETED

    def admin_login(self) -> None:
        body = {"username": "admin", "password": self.server.password}
        response = self.send(
            "POST", f"{MGMT}/authenticate", 200, token="", body=body, params={"method": "password"}
        )
        if response.status_code == 200:
            self.token = response.headers["zt-session"]
            self.ledger.api_sessions.append(response.json()["data"]["id"])
            self.ledger.writes += 1

    def device_login(self) -> bool:
        body = {"username": self.device.name, "password": DEVICE_PASSWORD}
        response = self.send(
            "POST", f"{CLIENT}/authenticate", 200, token="", body=body, params={"method": "password"}
        )
        if response.status_code != 200:
            return False
        self.device_token = response.headers["zt-session"]
        self.ledger.api_sessions.append(response.json()["data"]["id"])
        self.ledger.writes += 1
        return True

    def device_session(self) -> None:
        """A new device API session and its Dial session; now and then a logout, which ends both."""
        if not self.device_login():
            return
        api_session = self.ledger.api_sessions[-1]
        body = {"serviceId": self.device.service, "type": "Dial"}
        response = self.send("POST", f"{CLIENT}/sessions", 201, token=self.device_token, body=body)
        if response.status_code != 201:
            return
        session = response.json()["data"]["id"]
        self.ledger.sessions.append(session)
        self.ledger.writes += 1
        if self.rng.random() < 0.3:
            ended = (api_session, session)
            self.ledger.api_sessions.remove(api_session)  # unknown until the logout is answered
            self.ledger.sessions.remove(session)
            logout = self.send("DELETE", f"{CLIENT}/current-api-session", 200, token=self.device_token)
            self.device_token = ""
            if logout.status_code == 200:
                self.ledger.ended += ended
                self.ledger.writes += 1

    # -- reads --------------------------------------------------------------------------------
    def read(self) -> None:
        roll = self.rng.random()
        kind = self.rng.choice(KINDS)
        live = self.live(kind)
        if roll < 0.25 or not live:
            attribute = self.rng.choice(ATTRIBUTES)
            query = (
                f'anyOf(roleAttributes) = "{attribute}"'
                if kind.path != "service-policies"
                else f'anyOf(identityRoles) = "#{attribute}"'
            )
            self.send("GET", f"{MGMT}/{kind.path}", 200, params={"filter": query, "limit": "25"})
        elif roll < 0.4:
            query = f'name contains "w{self.index}-" sort by name desc limit 50'
            self.send("GET", f"{MGMT}/{kind.path}", 200, params={"filter": query})
        elif roll < 0.7:
            self.detail(self.rng.choice(live))
        elif roll < 0.75:
            self.advice()
        elif roll < 0.8:  # logged in and out all along by the other threads
            self.send("GET", f"{MGMT}/identities/{self.device.id}", 200)
        elif roll < 0.9:
            self.device_services()
        else:
            identities = self.live(KINDS[0])
            identity = self.rng.choice(identities).id if identities else self.device.id
            self.send("GET", f"{MGMT}/identities/{identity}/services", 200, params=ALL)

    def detail(self, record: Record) -> None:
        """Its own entity, which must show the worker's acknowledged writes."""
        response = self.send("GET", f"{MGMT}/{record.kind.path}/{record.id}", 200)
        if response.status_code == 200:
            seen = _checked(record.kind, response.json()["data"])
            if seen != record.fields:
                self.tally.mismatch(
                    f"{record.kind.path}/{record.id} read back {seen}, acknowledged {record.fields}"
                )

    def advice(self) -> None:
        identities, services = self.live(KINDS[0]), self.live(KINDS[1])
        identity = self.rng.choice(identities).id if identities else self.device.id
        service = self.rng.choice(services).id if services else self.device.service
        self.send("GET", f"{MGMT}/identities/{identity}/policy-advice/{service}", 200)

    def device_services(self) -> None:
        """The device's client service list, which always holds its target service."""
        if not self.device_token and not self.device_login():
            return
        response = self.send("GET", f"{CLIENT}/services", 200, token=self.device_token, params=ALL)
        if response.status_code == 200:
            ids = {row["id"] for row in response.json()["data"]}
            if self.device.service not in ids:
                self.tally.mismatch(f"the device's services {sorted(ids)} lack {self.device.service}")


def run_workers(workers: Iterable[Worker], stop: threading.Event, until: Callable[[], bool]) -> None:
    """Start ``workers``, wait (polling) until ``until()`` is true or no worker runs, then set
    ``stop`` and join them (bounded)."""
    started = list(workers)
    for worker in started:
        worker.start()
    while not until() and any(w.thread.is_alive() for w in started):
        time.sleep(0.02)
    stop.set()
    for worker in started:
        worker.thread.join(timeout=2 * REQUEST_TIMEOUT)
        assert not worker.thread.is_alive(), f"{worker.thread.name} did not stop"


# -- checks afterwards ----------------------------------------------------------------------------
def listing(server: Server, token: str, path: str) -> list[dict[str, Any]]:
    body = server.expect(server.call("GET", path, token, params=ALL, timeout=60), 200, f"list {path}")
    rows: list[dict[str, Any]] = body["data"]
    return rows


def audit(server: Server, token: str, ledgers: Iterable[Ledger]) -> list[str]:
    """What the server lacks or holds against the ledgers' acknowledged writes."""
    problems: list[str] = []
    ledgers = list(ledgers)
    current = {
        kind.path: {row["id"]: row for row in listing(server, token, f"{MGMT}/{kind.path}")} for kind in KINDS
    }
    for ledger in ledgers:
        for record in ledger.records.values():
            row = current[record.kind.path].get(record.id)
            state = None if row is None else _checked(record.kind, row)
            if state not in record.allowed():
                problems.append(
                    f"{record.kind.path}/{record.id}: holds {state}, acknowledged "
                    f"{'deleted' if record.deleted else record.fields}, pending {record.pending}"
                )
    api_sessions = {row["id"] for row in listing(server, token, f"{MGMT}/api-sessions")}
    sessions = {row["id"] for row in listing(server, token, f"{MGMT}/sessions")}
    for ledger in ledgers:
        problems += [f"api-sessions/{i} is missing" for i in ledger.api_sessions if i not in api_sessions]
        problems += [f"sessions/{i} is missing" for i in ledger.sessions if i not in sessions]
        problems += [f"{i} outlived its logout" for i in ledger.ended if i in api_sessions | sessions]
    return problems


def rebuilt_graph(db: Path, scratch: Path) -> PolicyGraph:
    """A policy graph built from a copy of the DuckDB file ``db`` (its WAL and its journal), as
    start-up does."""
    scratch.mkdir(parents=True, exist_ok=False)
    for source in (db, db.with_name(db.name + ".wal"), *(path for _, path in segments(db))):
        if source.exists():
            shutil.copy2(source, scratch / source.name)
    store = DuckDBStore(scratch / db.name)
    try:
        return build_graph(store)
    finally:
        store.close()


#: "identities" or "identity <id> services" -> ids: the entity and link sets compared.
Answers = dict[str, frozenset[str]]
#: The link set of an entity the rebuilt graph lacks.
ABSENT = frozenset({"<no such entity in the database>"})


def sample(rng: Random, ids: Iterable[str], size: int) -> list[str]:
    pool = sorted(ids)
    return sorted(rng.sample(pool, min(size, len(pool))))


def engine_answers(server: Server, token: str, rng: Random, size: int) -> Answers:
    """The served answers: entity ids, and the link sets of ``size`` identities and ``size``
    services drawn with ``rng``."""

    def ids(path: str) -> frozenset[str]:
        return frozenset(row["id"] for row in listing(server, token, f"{MGMT}/{path}"))

    answers = {
        "identities": ids("identities"),
        "services": ids("services"),
        "edge routers": ids("edge-routers"),
    }
    for identity in sample(rng, answers["identities"], size):
        answers[f"identity {identity} services"] = ids(f"identities/{identity}/services")
        answers[f"identity {identity} edge routers"] = ids(f"identities/{identity}/edge-routers")
    for service in sample(rng, answers["services"], size):
        answers[f"service {service} identities"] = ids(f"services/{service}/identities")
    return answers


def graph_answers(graph: PolicyGraph, served: Answers) -> Answers:
    """The answers of ``served`` from a rebuilt graph (:data:`ABSENT` for an entity it lacks)."""
    answers = {
        "identities": frozenset(graph.entity_ids(IDENTITY)),
        "services": frozenset(graph.entity_ids(SERVICE)),
        "edge routers": frozenset(graph.entity_ids(EDGE_ROUTER)),
    }
    for key in served.keys() - answers.keys():
        kind, id, what = key.split(" ", 2)
        if not graph.has_entity(IDENTITY if kind == "identity" else SERVICE, id):
            answers[key] = ABSENT
        elif what == "services":
            answers[key] = frozenset(graph.services_for_identity(id))
        elif what == "edge routers":
            answers[key] = frozenset(graph.edge_routers_for_identity(id))
        else:
            answers[key] = frozenset(graph.identities_for_service(id))
    return answers


def postgres_answers(url: str, served: Answers) -> Answers:
    """The answers of ``served`` from a policy graph built from the PostgreSQL database ``url``,
    as a start builds it."""
    store = PostgresStore(url)
    try:
        return graph_answers(build_graph(store), served)
    finally:
        store.close()


def differences(served: Answers, rebuilt: Answers) -> list[str]:
    problems = []
    for key in sorted(served.keys() | rebuilt.keys()):
        ours, theirs = served.get(key, frozenset()), rebuilt.get(key, frozenset())
        if ours != theirs:
            problems.append(
                f"{key}: served only {sorted(ours - theirs)}, rebuilt only {sorted(theirs - ours)}"
            )
    return problems


def integrity_results(server: Server, token: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run the data integrity check and answer its finished results' ``data``."""
    path = f"{MGMT}/database/data-integrity-results"
    server.expect(server.call("POST", f"{MGMT}/database/check-data-integrity", token), 202, "start the check")
    deadline = time.monotonic() + timeout
    while True:
        data: dict[str, Any] = server.expect(server.call("GET", path, token), 200, "integrity results")[
            "data"
        ]
        if not data["inProgress"] and data["endTime"] is not None:
            return data
        assert time.monotonic() < deadline, (
            f"the integrity check ran over {timeout:.0f} s\n{server.log_tail()}"
        )
        time.sleep(0.2)
