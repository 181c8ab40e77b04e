"""``POST /analysis/v1/query`` and ``/export``: read-only DuckDB SQL over access (docs/analysis.md §13).

Every query runs on a DuckDB connection of its own, in memory (never the controller's database),
opened with external access off (no file, no network, no extension loading, no Python replacement
scans) and its configuration locked once the views are registered. The views are computed from an
:class:`~engine.analysis.sql.AccessSnapshot` of the policy graph without materialising pairs:

- the entity and policy tables are Arrow tables, built once per revision (small: one row per
  entity or policy);
- pairs come from vectorised functions that turn one bitset into slots on demand
  (``_trellis_reach(service, type)`` is the union of the service's Dial or Bind policies'
  identity sides), laterally joined: a filter on a service (or an identity, a policy) is pushed
  below them, so "who can Dial X" unions X's policies and nothing else.

A statement is refused (400 ``INVALID_QUERY``, ``cause.field`` ``sql``) unless DuckDB's own parser
reads exactly one ``SELECT`` (``WITH``, ``VALUES``, ``FROM``, ``DESCRIBE``, ``SUMMARIZE`` parse as
such); one running past its time budget is interrupted (400 ``QUERY_TIMEOUT``), one past the memory
limit stopped (400 ``QUERY_TOO_LARGE``). Answers stop at the row budget (``truncated``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any
from uuid import UUID

import duckdb
import falcon
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from api.analysis_findings import findings_manager
from api.http import ok, read_model
from api.middleware import ADMIN
from api.parquet_chunks import PARQUET, ParquetChunks
from api.wire import WireModel
from engine.analysis import AnalysisManager
from engine.analysis.findings import evaluate
from engine.analysis.sql import (
    ENTITY_ORDER,
    POLICY_ORDER,
    AccessSnapshot,
    EntityRows,
    PolicyRows,
    snapshot_of,
)
from engine.entities.findings import RESOLVED
from engine.errors import FieldError, RateLimitedError
from engine.policy.model import POLICY_FIELDS

#: Seconds a query may run (the most a request's ``timeoutSeconds`` may ask).
QUERY_SECONDS = 10.0
#: Seconds an export may run, streaming included.
EXPORT_SECONDS = 300.0
#: Rows an answer holds by default, and at most (``limit``).
ROW_LIMIT_DEFAULT = 1_000
ROW_LIMIT_MAX = 10_000
#: Memory one query's DuckDB may use, and its threads.
MEMORY_LIMIT = "2GB"
THREADS = 2
#: Queries and exports running at once in this process; one more is 429.
CONCURRENT = 4
#: Longest statement accepted (characters).
SQL_MAX = 100_000

#: The views a query sees (docs/analysis.md §13), their names for ``export``'s ``view``.
VIEWS = (
    "identities",
    "services",
    "edge_routers",
    "posture_checks",
    "policies",
    "policy_members",
    "access_pairs",
    "access_paths",
    "router_reach",
    "service_routers",
    "findings",
)

# -- the views ------------------------------------------------------------------------------------

#: The schema of the identity-driven ``access_pairs`` and ``access_paths`` (see :func:`by_identity`).
BY_IDENTITY = "_by_identity"
_ENTITY_NAMES = {"identity": "identities", "service": "services", "edge-router": "edge_routers"}
_ENTITY_NAMES["posture-check"] = "posture_checks"
_ROLE_COLUMNS = {
    "identity": "identity_roles",
    "service": "service_roles",
    "edge-router": "edge_router_roles",
    "posture-check": "posture_check_roles",
}


def _matched(roles: str, alias: str) -> str:
    """The entries of a role list that select entity ``alias`` (docs/policy.md §1.2)."""
    return (
        f"list_filter({roles}, lambda r: r = '#all' OR r = '@' || {alias}.id"
        f" OR (starts_with(r, '#') AND list_contains({alias}.role_attributes, r[2:])))"
    )


_VIEW_SQL = (
    "CREATE VIEW identities AS SELECT id, name, role_attributes FROM _identities",
    "CREATE VIEW services AS SELECT id, name, role_attributes FROM _services",
    "CREATE VIEW edge_routers AS SELECT id, name, role_attributes, _trellis_online(slot) AS online"
    " FROM _edge_routers",
    "CREATE VIEW posture_checks AS SELECT id, name, role_attributes FROM _posture_checks",
    "CREATE VIEW policies AS SELECT id, name, kind, type, semantic, identity_roles, service_roles,"
    " edge_router_roles, posture_check_roles FROM _policies",
    "CREATE VIEW _entities AS"
    " SELECT 0 AS code, slot, id, name FROM _identities UNION ALL"
    " SELECT 1, slot, id, name FROM _services UNION ALL"
    " SELECT 2, slot, id, name FROM _edge_routers UNION ALL"
    " SELECT 3, slot, id, name FROM _posture_checks",
    "CREATE VIEW policy_members AS"
    " SELECT x.id AS policy_id, x.name AS policy_name, x.kind AS policy_kind, x.entity_kind,"
    " e.id AS entity_id, e.name AS entity_name"
    " FROM (SELECT p.id, p.name, p.kind, k.entity_code, k.entity_kind,"
    " unnest(_trellis_members(p.code, p.slot, k.entity_code)) AS entity_slot"
    " FROM _policies p JOIN _sides k ON k.policy_code = p.code) x"
    " JOIN _entities e ON e.code = x.entity_code AND e.slot = x.entity_slot",
    "CREATE VIEW access_pairs AS"
    " SELECT i.id AS identity_id, i.name AS identity_name, x.id AS service_id,"
    " x.name AS service_name, x.type"
    " FROM (SELECT s.id, s.name, t.type, unnest(_trellis_reach(s.slot, t.type)) AS identity_slot"
    " FROM _services s CROSS JOIN (VALUES ('Dial'), ('Bind')) AS t(type)) x"
    " JOIN _identities i ON i.slot = x.identity_slot",
    "CREATE VIEW access_paths AS"
    " SELECT i.id AS identity_id, i.name AS identity_name, x.id AS service_id,"
    " x.name AS service_name, p.type, p.id AS policy_id, p.name AS policy_name, p.semantic,"
    f" {_matched('p.identity_roles', 'i')} AS identity_roles_matched,"
    f" {_matched('p.service_roles', 'x')} AS service_roles_matched"
    " FROM (SELECT y.*, unnest(_trellis_members(0, y.policy_slot, 0)) AS identity_slot"
    " FROM (SELECT s.id, s.name, s.role_attributes,"
    " unnest(_trellis_service_policies(s.slot)) AS policy_slot FROM _services s) y) x"
    " JOIN _policies p ON p.code = 0 AND p.slot = x.policy_slot"
    " JOIN _identities i ON i.slot = x.identity_slot",
    "CREATE VIEW router_reach AS"
    " SELECT x.id AS identity_id, x.name AS identity_name, r.id AS edge_router_id,"
    " r.name AS edge_router_name, _trellis_online(r.slot) AS online"
    " FROM (SELECT i.id, i.name, unnest(_trellis_identity_routers(i.slot)) AS router_slot"
    " FROM _identities i) x JOIN _edge_routers r ON r.slot = x.router_slot",
    "CREATE VIEW service_routers AS"
    " SELECT x.id AS service_id, x.name AS service_name, r.id AS edge_router_id,"
    " r.name AS edge_router_name, _trellis_online(r.slot) AS online"
    " FROM (SELECT s.id, s.name, unnest(_trellis_service_routers(s.slot)) AS router_slot"
    " FROM _services s) x JOIN _edge_routers r ON r.slot = x.router_slot",
    "CREATE VIEW findings AS SELECT * FROM _findings",
    # the same pairs and paths driven by identity (see by_identity): a filter on an identity is
    # pushed below the per-identity functions, as one on a service is below the views above
    f"CREATE SCHEMA {BY_IDENTITY}",
    f"CREATE VIEW {BY_IDENTITY}.access_pairs AS"
    " SELECT x.id AS identity_id, x.name AS identity_name, s.id AS service_id,"
    " s.name AS service_name, x.type"
    " FROM (SELECT i.id, i.name, t.type,"
    " unnest(_trellis_identity_reach(i.slot, t.type)) AS service_slot"
    " FROM main._identities i CROSS JOIN (VALUES ('Dial'), ('Bind')) AS t(type)) x"
    " JOIN main._services s ON s.slot = x.service_slot",
    f"CREATE VIEW {BY_IDENTITY}.access_paths AS"
    " SELECT x.id AS identity_id, x.name AS identity_name, s.id AS service_id,"
    " s.name AS service_name, p.type, p.id AS policy_id, p.name AS policy_name, p.semantic,"
    f" {_matched('p.identity_roles', 'x')} AS identity_roles_matched,"
    f" {_matched('p.service_roles', 's')} AS service_roles_matched"
    " FROM (SELECT y.*, unnest(_trellis_members(0, y.policy_slot, 1)) AS service_slot"
    " FROM (SELECT i.id, i.name, i.role_attributes,"
    " unnest(_trellis_identity_policies(i.slot)) AS policy_slot FROM main._identities i) y) x"
    " JOIN main._policies p ON p.code = 0 AND p.slot = x.policy_slot"
    " JOIN main._services s ON s.slot = x.service_slot",
)
_FINDINGS_TABLE = (
    "CREATE TABLE _findings (id VARCHAR, kind VARCHAR, severity VARCHAR, subject_type VARCHAR,"
    " subject_id VARCHAR, message VARCHAR, details VARCHAR)"
)

_EMPTY = np.zeros(0, dtype=np.int32)
#: Arrow's allocations here come from the C library's allocator, not Arrow's default (mimalloc or
#: jemalloc), which kept what the tables had used after they were dropped (20 MB at tier L)
_POOL = pa.system_memory_pool()


def _indices(bits: int) -> np.ndarray[Any, np.dtype[np.int32]]:
    """The set slots of a bitset, ascending, as int32 (unpacked by numpy: C speed)."""
    if bits <= 0:
        return _EMPTY
    raw = np.frombuffer(bits.to_bytes((bits.bit_length() + 7) >> 3, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).astype(np.int32)


def _lists(bitsets: list[int]) -> pa.ListArray:
    parts = [_indices(bits) for bits in bitsets]
    offsets = np.zeros(len(parts) + 1, dtype=np.int32)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    values = np.concatenate(parts) if parts else _EMPTY
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values), pool=_POOL)


def _typed_lists(bits_of: Callable[[int, str], int], slots: Any, types: Any) -> pa.ListArray:
    """Per row, the slots of ``bits_of(slot, type)`` (none for a type other than Dial or Bind)."""
    kinds = types.to_pylist()
    return _lists(
        [bits_of(s, t) if t in ("Dial", "Bind") else 0 for s, t in zip(_ints(slots), kinds, strict=True)]
    )


def _ints(array: Any) -> list[int]:
    return [-1 if v is None else int(v) for v in array.to_pylist()]


def _entity_table(rows: EntityRows) -> pa.Table:
    return pa.table(
        {
            "slot": pa.array(rows.slots, pa.int32()),
            "id": pa.array(rows.ids, pa.string(), memory_pool=_POOL),
            "name": pa.array(rows.names, pa.string(), memory_pool=_POOL),
            "role_attributes": pa.ListArray.from_arrays(
                pa.array(rows.attribute_offsets, pa.int32()),
                pa.array(rows.attribute_values, pa.string(), memory_pool=_POOL),
                pool=_POOL,
            ),
        }
    )


def _policy_table(all_policies: Mapping[str, PolicyRows]) -> pa.Table:
    columns: dict[str, list[Any]] = {
        k: [] for k in ("code", "slot", "kind", "id", "name", "type", "semantic")
    }
    roles: dict[str, list[Any]] = {_ROLE_COLUMNS[k]: [] for k in ENTITY_ORDER}
    for code, policy_kind in enumerate(POLICY_ORDER):
        policies = all_policies[policy_kind]
        count = len(policies.slots)
        columns["code"] += [code] * count
        columns["slot"] += policies.slots
        columns["kind"] += [policy_kind] * count
        columns["id"] += policies.ids
        columns["name"] += policies.names
        columns["type"] += policies.types
        columns["semantic"] += policies.semantics
        for entity_kind, column in _ROLE_COLUMNS.items():
            given = policies.roles.get(entity_kind)
            roles[column] += given if given is not None else [None] * count
    return pa.table(
        {
            "code": pa.array(columns["code"], pa.int32(), memory_pool=_POOL),
            "slot": pa.array(columns["slot"], pa.int32(), memory_pool=_POOL),
            **{
                k: pa.array(columns[k], pa.string(), memory_pool=_POOL)
                for k in ("kind", "id", "name", "type", "semantic")
            },
            **{k: pa.array(v, pa.list_(pa.string()), memory_pool=_POOL) for k, v in roles.items()},
        }
    )


class SqlTables:
    """The Arrow tables and functions of one :class:`AccessSnapshot` (shared by its queries).

    The tables (one row per entity or policy) are made one at a time for the revision's database
    to copy in (:meth:`build`), each kind's rows dropped from the snapshot once its table is made
    and the table itself once copied: at tier L, rows and tables were 60 MB kept beside DuckDB's
    copy. The functions read only the snapshot's bitsets."""

    def __init__(self, snapshot: AccessSnapshot) -> None:
        self.snapshot = snapshot
        routers = snapshot.entities["edge-router"]
        self._router_ids = dict(zip(routers.slots.tolist(), routers.ids, strict=True))
        #: whether a router is online now (None: not known, offline)
        self.is_online: Callable[[str], bool] | None = None

    def build(self) -> Iterator[tuple[str, pa.Table]]:
        """(name, Arrow table) of each table, one at a time; the snapshot's rows are gone after."""
        snapshot = self.snapshot
        for kind in ENTITY_ORDER:
            yield "_" + _ENTITY_NAMES[kind], _entity_table(snapshot.entities.pop(kind))
        yield "_policies", _policy_table(snapshot.policies)
        snapshot.drop_rows()
        sides = [
            (code, ENTITY_ORDER.index(entity_kind))
            for code, kind in enumerate(POLICY_ORDER)
            for entity_kind in POLICY_FIELDS[kind]
        ]
        yield (
            "_sides",
            pa.table(
                {
                    "policy_code": pa.array([s[0] for s in sides], pa.int32()),
                    "entity_code": pa.array([s[1] for s in sides], pa.int32()),
                    "entity_kind": pa.array([ENTITY_ORDER[s[1]] for s in sides], pa.string()),
                }
            ),
        )

    # -- the functions (Arrow vectorised: one call per chunk of rows) -------------------------
    def reach(self, services: Any, types: Any) -> pa.ListArray:
        return _typed_lists(self.snapshot.service_identities, services, types)

    def identity_reach(self, identities: Any, types: Any) -> pa.ListArray:
        return _typed_lists(self.snapshot.identity_services, identities, types)

    def service_policies(self, services: Any) -> pa.ListArray:
        return _lists([self.snapshot.service_policies(s) for s in _ints(services)])

    def identity_policies(self, identities: Any) -> pa.ListArray:
        return _lists([self.snapshot.identity_policies(i) for i in _ints(identities)])

    def members(self, policy_codes: Any, policies: Any, entity_codes: Any) -> pa.ListArray:
        snap = self.snapshot
        out = []
        for code, policy, entity in zip(
            _ints(policy_codes), _ints(policies), _ints(entity_codes), strict=True
        ):
            if 0 <= code < len(POLICY_ORDER) and 0 <= entity < len(ENTITY_ORDER):
                out.append(snap.policy_members(POLICY_ORDER[code], policy, ENTITY_ORDER[entity]))
            else:
                out.append(0)
        return _lists(out)

    def identity_routers(self, identities: Any) -> pa.ListArray:
        return _lists([self.snapshot.identity_routers(i) for i in _ints(identities)])

    def service_routers(self, services: Any) -> pa.ListArray:
        return _lists([self.snapshot.service_routers(s) for s in _ints(services)])

    def online(self, routers: Any) -> pa.BooleanArray:
        by_slot = self._router_ids
        check = self.is_online
        out: list[bool | None] = []
        for slot in _ints(routers):
            router = by_slot.get(slot)
            out.append(None if router is None or check is None else bool(check(router)))
        return pa.array(out, pa.bool_(), memory_pool=_POOL)


def findings_table(found: list[Any]) -> pa.Table:
    """Findings (:func:`engine.analysis.findings.evaluate`) as the ``findings`` view's rows."""
    return pa.table(
        {
            "id": pa.array([f.id for f in found], pa.string(), memory_pool=_POOL),
            "kind": pa.array([f.kind for f in found], pa.string(), memory_pool=_POOL),
            "severity": pa.array([f.severity for f in found], pa.string(), memory_pool=_POOL),
            "subject_type": pa.array([f.subject_type for f in found], pa.string(), memory_pool=_POOL),
            "subject_id": pa.array([f.subject_id for f in found], pa.string(), memory_pool=_POOL),
            "message": pa.array([f.message for f in found], pa.string(), memory_pool=_POOL),
            "details": pa.array(
                [orjson.dumps(dict(f.details), default=str).decode() for f in found],
                pa.string(),
                memory_pool=_POOL,
            ),
        }
    )


# -- running a statement ----------------------------------------------------------------------------


class QueryError(FieldError):
    """A statement refused or stopped: 400, ``cause.field`` ``sql`` (``field`` for another)."""

    code = "INVALID_QUERY"

    def __init__(
        self, message: str, reason: str | None = None, code: str | None = None, field: str = "sql"
    ) -> None:
        super().__init__(field, reason or message)
        self.message = message
        self.args = (message,)
        if code is not None:
            self.code = code


@dataclass
class Answer:
    columns: list[dict[str, str]]
    rows: list[list[Any]]
    truncated: bool
    seconds: float


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal | UUID | timedelta):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def check_statement(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    """The one SELECT statement of ``sql``, read by DuckDB's parser; else :class:`QueryError`."""
    if len(sql) > SQL_MAX:
        raise QueryError(f"the statement is longer than {SQL_MAX} characters")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as ex:
        raise QueryError("the statement does not parse", str(ex)) from None
    if len(statements) != 1:
        raise QueryError(f"exactly one statement is allowed, not {len(statements)}")
    statement = statements[0]
    if statement.type != duckdb.StatementType.SELECT:
        kind = str(statement.type).rsplit(".", 1)[-1]
        raise QueryError(f"only a read-only SELECT (or WITH) statement is allowed, not {kind}")
    return str(statement.query).strip().rstrip(";")


_IDENTITY_COLUMNS = frozenset({"identity_id", "identity_name"})
_SERVICE_COLUMNS = frozenset({"service_id", "service_name"})
_DRIVEN = frozenset({"access_pairs", "access_paths"})


def by_identity(statement: str) -> bool:
    """Whether ``statement`` should read the identity-driven ``access_pairs`` and ``access_paths``.

    Both shapes of each view hold the same rows; what differs is which filter DuckDB can push
    below the bitset functions: a service's (the views of ``main``, unnested per service) or an
    identity's (those of :data:`BY_IDENTITY`, unnested per identity). A statement reads the latter
    when it names one of those views and compares (``=``, ``==`` or ``IN``) an identity column
    (``identity_id``, ``identity_name``) with a literal and no service column (``service_id``,
    ``service_name``) with one: "what can identity Y Dial", joined to the services or not; with no
    literal on either side, when it compares an identity column with anything (a join with one
    filtered identity, a subquery) and no service column. Read from DuckDB's tokens, so text in
    strings and comments is never taken for a column; a statement this reads wrong is as right as
    ever, only slower."""
    try:
        tokens = duckdb.tokenize(statement)
    except (duckdb.Error, RuntimeError):
        return False
    kinds = duckdb.token_type
    words: list[tuple[Any, str]] = []
    for n, (start, kind) in enumerate(tokens):
        if kind == kinds.comment:
            continue
        end = tokens[n + 1][0] if n + 1 < len(tokens) else len(statement)
        text = statement[start:end].strip()
        if kind == kinds.identifier:
            text = text.strip('"')
        words.append((kind, text.lower()))
    if not any(kind == kinds.identifier and text in _DRIVEN for kind, text in words):
        return False
    literals = (kinds.string_const, kinds.numeric_const)

    def kind_at(n: int) -> Any:
        return words[n][0] if 0 <= n < len(words) else None

    def compared(n: int) -> str | None:
        """How the column at token ``n`` is compared: with a literal, with something else, or
        not at all."""
        after = words[n + 1][1] if n + 1 < len(words) else ""
        if after in ("=", "=="):
            return "literal" if kind_at(n + 2) in literals else "other"
        if after == "in":
            following = words[n + 2][1] if n + 2 < len(words) else ""
            return "literal" if following == "(" and kind_at(n + 3) in literals else "other"
        before = n - 1
        while before >= 1 and words[before][1] == ".":  # a qualifier: p.identity_id
            before -= 2
        if before >= 0 and words[before][1] in ("=", "=="):
            return "literal" if kind_at(before - 1) in literals else "other"
        return None

    found: dict[tuple[str, str], bool] = {}
    for n, (kind, text) in enumerate(words):
        if kind != kinds.identifier:
            continue
        side = "identity" if text in _IDENTITY_COLUMNS else "service" if text in _SERVICE_COLUMNS else None
        how = compared(n) if side is not None else None
        if side is not None and how is not None:
            found[side, how] = True
    if found.get(("identity", "literal")) or found.get(("service", "literal")):
        return bool(found.get(("identity", "literal"))) and not found.get(("service", "literal"))
    return bool(found.get(("identity", "other"))) and not found.get(("service", "other"))


class SqlDatabase:
    """One revision's private in-memory DuckDB database: its tables copied in, the functions and
    views created, external access off and the configuration locked. Queries run on cursors of it
    (a DuckDB connection each); nothing but this module's setup ever writes to it."""

    def __init__(self, tables: SqlTables, *, memory_limit: str, threads: int) -> None:
        self.tables = tables
        self.revision = tables.snapshot.revision
        self._findings_done = False
        self._lock = threading.Lock()
        con = self.con = duckdb.connect(
            ":memory:",
            config={
                "enable_external_access": False,
                "python_enable_replacements": False,
                "autoload_known_extensions": False,
                "autoinstall_known_extensions": False,
                "allow_community_extensions": False,
                "temp_directory": "",
                # the pair views' unnests are estimated small: they must stay the probe side
                # (streamed) and the entity tables the build side, or an export builds a hash
                # table of every pair
                "disabled_optimizers": "build_side_probe_side",
                "memory_limit": memory_limit,
                # the tables are copied in on one thread: on two, the second one's allocations
                # were left scattered among what the tables keep (7 MB more resident at tier L)
                "threads": 1,
            },
        )
        try:
            for name, table in tables.build():
                con.register("_arrow", table)
                con.execute(f"CREATE TABLE {name} AS SELECT * FROM _arrow")
                con.unregister("_arrow")
                del table
            con.execute(_FINDINGS_TABLE)
            lists = "INTEGER[]"
            functions: list[tuple[str, Callable[..., Any], list[str], str]] = [
                ("_trellis_reach", tables.reach, ["INTEGER", "VARCHAR"], lists),
                ("_trellis_identity_reach", tables.identity_reach, ["INTEGER", "VARCHAR"], lists),
                ("_trellis_service_policies", tables.service_policies, ["INTEGER"], lists),
                ("_trellis_identity_policies", tables.identity_policies, ["INTEGER"], lists),
                ("_trellis_members", tables.members, ["INTEGER", "INTEGER", "INTEGER"], lists),
                ("_trellis_identity_routers", tables.identity_routers, ["INTEGER"], lists),
                ("_trellis_service_routers", tables.service_routers, ["INTEGER"], lists),
                ("_trellis_online", tables.online, ["INTEGER"], "BOOLEAN"),
            ]
            # by name, not duckdb.func's enums: the strings are what every DuckDB release takes
            create: Any = con.create_function
            for name, function, parameters, returns in functions:
                create(
                    name,
                    function,
                    parameters,
                    returns,
                    type="arrow",
                    null_handling="special",
                    side_effects=False,
                )
            for statement in _VIEW_SQL:
                con.execute(statement)
            con.execute(f"SET threads = {int(threads)}")
            con.execute("SET lock_configuration = true")
        except BaseException:
            con.close()
            raise

    def ensure_findings(self, compute: Callable[[], list[Any]] | None) -> None:
        """Fill ``_findings`` once (when a query first names the view)."""
        with self._lock:
            if self._findings_done or compute is None:
                return
            self.con.register("_arrow", findings_table(compute()))
            self.con.execute("INSERT INTO _findings SELECT * FROM _arrow")
            self.con.unregister("_arrow")
            self._findings_done = True

    def cursor(self, identity_driven: bool = False) -> duckdb.DuckDBPyConnection:
        """A new connection to the database, its views the default (those driven by identity
        first with ``identity_driven``, :func:`by_identity`)."""
        with self._lock:
            con = self.con.cursor()
        try:
            if identity_driven:
                con.execute(f"SET search_path = '{BY_IDENTITY},main'")
        except BaseException:
            con.close()
            raise
        return con

    def close(self) -> None:
        """Close the database (queries still running on it end with an error)."""
        with self._lock:
            self.con.close()


class SqlEngine:
    """Queries over the access views: a database per revision, a connection per query."""

    def __init__(
        self,
        *,
        memory_limit: str = MEMORY_LIMIT,
        threads: int = THREADS,
        concurrent: int = CONCURRENT,
    ) -> None:
        self.memory_limit = memory_limit
        self.threads = threads
        self.slots = threading.BoundedSemaphore(concurrent)
        self._database: SqlDatabase | None = None
        self._lock = threading.Lock()

    def database(
        self,
        revision: int,
        take: Callable[[], AccessSnapshot],
        online: Callable[[str], bool] | None = None,
    ) -> SqlDatabase:
        """The database at ``revision``, cached, or built from the snapshot ``take`` takes."""
        with self._lock:
            cached = self._database
            if cached is None or cached.revision != revision:
                tables = SqlTables(take())
                tables.is_online = online
                cached = self._database = SqlDatabase(
                    tables, memory_limit=self.memory_limit, threads=self.threads
                )
            return cached

    def of(self, snapshot: AccessSnapshot, online: Callable[[str], bool] | None = None) -> SqlDatabase:
        """The database of one snapshot (offline use: no cache by revision)."""
        tables = SqlTables(snapshot)
        tables.is_online = online
        return SqlDatabase(tables, memory_limit=self.memory_limit, threads=self.threads)

    def _acquire(self) -> None:
        if not self.slots.acquire(timeout=1.0):
            raise RateLimitedError("too many SQL queries are running; try again later")

    @staticmethod
    def open(
        database: SqlDatabase, sql: str, findings: Callable[[], list[Any]] | None
    ) -> tuple[duckdb.DuckDBPyConnection, str]:
        """A new connection for ``sql`` (checked first) and the statement to run on it."""
        con = database.cursor()
        try:
            statement = check_statement(con, sql)
            if "findings" in statement.lower():
                database.ensure_findings(findings)
            if by_identity(statement):
                con.close()
                con = database.cursor(identity_driven=True)
        except BaseException:
            con.close()
            raise
        return con, statement

    def query(
        self,
        database: SqlDatabase,
        sql: str,
        *,
        limit: int = ROW_LIMIT_DEFAULT,
        seconds: float = QUERY_SECONDS,
        findings: Callable[[], list[Any]] | None = None,
    ) -> Answer:
        """Run one read-only statement; at most ``limit`` rows, within ``seconds``."""
        self._acquire()
        try:
            started = time.perf_counter()
            con, statement = self.open(database, sql, findings)
            timer = threading.Timer(seconds, con.interrupt)
            timer.daemon = True
            timer.start()
            try:
                cursor = con.execute(statement)
                columns = [{"name": str(d[0]), "type": str(d[1])} for d in cursor.description or []]
                fetched = cursor.fetchmany(limit + 1)
                rows = [[_jsonable(v) for v in row] for row in fetched[:limit]]
                return Answer(columns, rows, len(fetched) > limit, time.perf_counter() - started)
            except duckdb.Error as ex:
                raise _stopped(ex, seconds) from None
            finally:
                timer.cancel()
                con.close()
        finally:
            self.slots.release()

    def export(
        self,
        database: SqlDatabase,
        sql: str,
        *,
        seconds: float = EXPORT_SECONDS,
        findings: Callable[[], list[Any]] | None = None,
        batch_rows: int = 122_880,
    ) -> Iterator[bytes]:
        """Parquet of the statement's result, in chunks as DuckDB produces them.

        The statement is checked, bound and started (and its first batch read) before this
        returns, so a refusal or an early timeout is an exception, not a broken file; one that
        runs out of time later ends the stream short."""
        self._acquire()
        try:
            con, statement = self.open(database, sql, findings)
        except BaseException:
            self.slots.release()
            raise
        if _WHOLE_PAIRS.fullmatch(statement):
            con.close()
            return self._released(pairs_parquet(database, seconds))
        timer = threading.Timer(seconds, con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            reader = con.sql(statement).to_arrow_reader(batch_rows)
            first = next(iter(reader), None)
        except BaseException as ex:
            timer.cancel()
            con.close()
            self.slots.release()
            if isinstance(ex, duckdb.Error):
                raise _stopped(ex, seconds) from None
            raise
        return self._stream(con, timer, reader, first)

    def _released(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        try:
            yield from chunks
        finally:
            self.slots.release()

    def _stream(
        self, con: duckdb.DuckDBPyConnection, timer: threading.Timer, reader: Any, first: Any
    ) -> Iterator[bytes]:
        sink = ParquetChunks()
        try:
            writer = pq.ParquetWriter(sink, reader.schema, compression="zstd")
            if first is not None:
                writer.write_batch(first)
                yield sink.take()
                for batch in reader:
                    writer.write_batch(batch)
                    if sink.size >= 1 << 20:
                        yield sink.take()
            writer.close()
            yield sink.take()
        except (duckdb.Error, pa.ArrowException):
            return  # out of time or memory while streaming: the file ends short
        finally:
            timer.cancel()
            con.close()
            self.slots.release()


#: ``SELECT * FROM access_pairs``, the whole view: exported without DuckDB (:func:`pairs_parquet`).
_WHOLE_PAIRS = re.compile(r"\s*select\s+\*\s+from\s+access_pairs\s*", re.IGNORECASE)
#: Rows per Parquet row group of :func:`pairs_parquet`.
PAIRS_GROUP_ROWS = 1 << 22


def pairs_parquet(database: SqlDatabase, seconds: float = EXPORT_SECONDS) -> Iterator[bytes]:
    """All of ``access_pairs`` as Parquet, service by service, straight from the bitsets.

    The rows are those of the view (same columns, same pairs), each column dictionary-encoded
    over the entity tables (the identity columns index the identities, the service columns
    repeat one service), so no string is copied per row: Parquet's own dictionary encoding is
    what is written (the entity columns are read from the database's tables, for the export's
    time only). Past ``seconds`` the file ends short."""
    snapshot = database.tables.snapshot
    con = database.cursor()
    try:
        identities = con.sql("SELECT slot, id, name FROM _identities ORDER BY slot").to_arrow_table()
        services = con.sql("SELECT slot, id, name FROM _services ORDER BY slot").to_arrow_table()
    finally:
        con.close()
    identity_slots = identities.column("slot").to_numpy().astype(np.int64)
    capacity = int(identity_slots.max()) + 1 if len(identity_slots) else 0
    row_of = np.full(capacity, -1, dtype=np.int32)
    row_of[identity_slots] = np.arange(len(identity_slots), dtype=np.int32)
    identity_ids = identities.column("id").combine_chunks()
    identity_names = identities.column("name").combine_chunks()
    service_ids = services.column("id").combine_chunks()
    service_names = services.column("name").combine_chunks()
    service_slots = [int(v) for v in services.column("slot").to_numpy()]
    kinds = pa.array(["Dial", "Bind"], pa.string())
    column = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema(
        [(name, column) for name in ("identity_id", "identity_name", "service_id", "service_name", "type")]
    )
    deadline = time.monotonic() + seconds
    sink = ParquetChunks()
    # no column statistics: computing them looks every row's string up (six times the time)
    writer = pq.ParquetWriter(sink, schema, compression="zstd", write_statistics=False)
    parts: list[tuple[Any, int, int]] = []
    pending = 0

    def flush() -> None:
        rows = np.concatenate([p[0] for p in parts])
        service_rows = np.concatenate([np.full(len(p[0]), p[1], dtype=np.int32) for p in parts])
        type_rows = np.concatenate([np.full(len(p[0]), p[2], dtype=np.int32) for p in parts])
        batch = pa.record_batch(
            [
                pa.DictionaryArray.from_arrays(pa.array(rows), identity_ids),
                pa.DictionaryArray.from_arrays(pa.array(rows), identity_names),
                pa.DictionaryArray.from_arrays(pa.array(service_rows), service_ids),
                pa.DictionaryArray.from_arrays(pa.array(service_rows), service_names),
                pa.DictionaryArray.from_arrays(pa.array(type_rows), kinds),
            ],
            schema=schema,
        )
        writer.write_batch(batch, row_group_size=PAIRS_GROUP_ROWS)
        parts.clear()

    for service_row, slot in enumerate(service_slots):
        for type_row, kind in enumerate(("Dial", "Bind")):
            found = _indices(snapshot.service_identities(slot, kind))
            if len(found):
                parts.append((row_of[found[found < capacity]], service_row, type_row))
                pending += len(found)
        if pending >= PAIRS_GROUP_ROWS:
            flush()
            pending = 0
            yield sink.take()
            if time.monotonic() > deadline:
                return  # out of time: the file ends short (no footer)
    if parts:
        flush()
    writer.close()
    yield sink.take()


def _stopped(ex: duckdb.Error, seconds: float) -> QueryError:
    text = str(ex)
    if isinstance(ex, duckdb.InterruptException):
        return QueryError(
            f"the query ran past its time budget ({seconds:g} s) and was stopped", code="QUERY_TIMEOUT"
        )
    if isinstance(ex, duckdb.OutOfMemoryException):
        return QueryError("the query needs more memory than a query may use", text, code="QUERY_TOO_LARGE")
    if isinstance(ex, duckdb.PermissionException):
        return QueryError("the query reads files or other external state, which is not allowed", text)
    return QueryError("the query failed", text)


# -- the live controller's side -------------------------------------------------------------------


class LiveAccess:
    """The controller's :class:`SqlEngine`, its snapshots taken under the store's lock."""

    def __init__(self, analysis: AnalysisManager, engine: SqlEngine | None = None) -> None:
        self.analysis = analysis
        self.engine = engine or SqlEngine()

    def database(self) -> SqlDatabase:
        analysis = self.analysis

        def take() -> AccessSnapshot:
            revision, view, graph = analysis._consistent()
            snapshot = snapshot_of(graph, revision, analysis._namer(view))
            # the fork is not kept with the revision's database (at tier L it held most of what a
            # first query added to the process): the findings view reads the findings manager's
            if findings_manager(analysis) is not None:
                snapshot.graph = None
            return snapshot

        return self.engine.database(analysis.revision(), take, analysis.managers.fleet.is_online)

    def findings(self, database: SqlDatabase) -> Callable[[], list[Any]]:
        """The findings there are now: the findings manager's (evaluated on the live graph, with
        live online and posture data), else those of the database's snapshot."""
        analysis = self.analysis

        def compute() -> list[Any]:
            manager = findings_manager(analysis)
            if manager is not None:
                return [f for f in manager.views() if f.status != RESOLVED]
            graph = database.tables.snapshot.graph
            if graph is None:
                return []
            view = analysis.store.view()
            now = analysis.env.clock.now()

            def posture(identity_id: str, checks: Any) -> Mapping[str, bool]:
                verdicts = analysis.posture_verdicts(identity_id, checks, view, now)
                return {c: v.passes for c, v in verdicts.items()}

            return evaluate(
                graph,
                names=analysis._namer(view),
                online=analysis.managers.fleet.is_online,
                posture=posture,
            )

        return compute


class SqlQuery(WireModel):
    """``POST /query``: one read-only statement, a row budget and a time budget."""

    sql: Annotated[str, Field(min_length=1, max_length=SQL_MAX)]
    limit: Annotated[int, Field(ge=0, le=ROW_LIMIT_MAX)] = ROW_LIMIT_DEFAULT
    timeout_seconds: Annotated[float, Field(gt=0, le=QUERY_SECONDS)] = QUERY_SECONDS


class SqlExport(WireModel):
    """``POST /export``: a view's rows (``view``) or a statement's (``sql``) as Parquet."""

    sql: Annotated[str, Field(min_length=1, max_length=SQL_MAX)] | None = None
    view: str | None = None
    timeout_seconds: Annotated[float, Field(gt=0, le=EXPORT_SECONDS)] = EXPORT_SECONDS


_RESPONSES = {
    "413": {"description": "the request body is too large"},
    "429": {"description": "too many SQL queries are running"},
}


class Query:
    """Run one read-only SQL statement over the access views."""

    auth = ADMIN
    body_models = {"post": SqlQuery}
    responses = _RESPONSES

    def __init__(self, live: LiveAccess) -> None:
        self.live = live

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Run a read-only SQL query (DuckDB) over access; rows up to ``limit``."""
        body = read_model(req, SqlQuery)
        database = self.live.database()
        answer = self.live.engine.query(
            database,
            body.sql,
            limit=body.limit,
            seconds=body.timeout_seconds,
            findings=self.live.findings(database),
        )
        ok(
            resp,
            {"columns": answer.columns, "rows": answer.rows, "truncated": answer.truncated},
            {
                "revision": database.revision,
                "rowCount": len(answer.rows),
                "limit": body.limit,
                "seconds": round(answer.seconds, 6),
            },
        )


class Export:
    """Stream a view or a query's result as a Parquet file."""

    auth = ADMIN
    body_models = {"post": SqlExport}
    responses = _RESPONSES

    def __init__(self, live: LiveAccess) -> None:
        self.live = live

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Export a view (``view``) or a read-only query (``sql``) as Parquet, streamed."""
        body = read_model(req, SqlExport)
        sql = export_statement(body.sql, body.view)
        database = self.live.database()
        chunks = self.live.engine.export(
            database, sql, seconds=body.timeout_seconds, findings=self.live.findings(database)
        )
        resp.content_type = PARQUET
        name = body.view or "query"
        resp.set_header("Content-Disposition", f'attachment; filename="{name}.parquet"')
        resp.set_header("X-Trellis-Revision", str(database.revision))
        resp.stream = chunks


def export_statement(sql: str | None, view: str | None) -> str:
    """The statement an export runs: ``sql``, or all of ``view``."""
    if (sql is None) == (view is None):
        raise QueryError("give either sql or view", code="COULD_NOT_VALIDATE")
    if view is not None:
        if view not in VIEWS:
            raise QueryError(
                f"no view {view!r}: one of {', '.join(VIEWS)}", code="COULD_NOT_VALIDATE", field="view"
            )
        return f"SELECT * FROM {view}"
    assert sql is not None
    return sql


def mount_sql(routes: Any, analysis: AnalysisManager, mount: Callable[[str, Any], None]) -> None:
    """Mount ``/query`` and ``/export`` with ``register``'s ``mount``."""
    live = LiveAccess(analysis)
    mount("/query", Query(live))
    mount("/export", Export(live))


__all__ = [
    "BY_IDENTITY",
    "VIEWS",
    "Answer",
    "QueryError",
    "SqlDatabase",
    "SqlEngine",
    "SqlTables",
    "by_identity",
    "check_statement",
    "export_statement",
    "mount_sql",
]
