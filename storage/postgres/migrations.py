"""Numbered schema migrations of the PostgreSQL store. Never edit a released migration: add the next.

The layout is the DuckDB store's (:mod:`storage.duckdb.migrations`), as of its latest version:
one table per entity kind, ``(id text PRIMARY KEY, doc json NOT NULL)``, the document being the
entity's fields as :mod:`storage.codec` encodes them; ``settings``; the ``change_log``. Two
things are PostgreSQL's own:

* ``doc`` is ``json``, not ``jsonb``: PostgreSQL keeps a ``json`` value as the text it was
  given, so a document reads back byte for byte as it was written (``jsonb`` would rewrite
  numbers such as ``1e300`` into another form, and refuses the escape ``\\u0000`` that a string
  may hold). SQL reads every field all the same: ``SELECT id, doc->>'name' FROM identities``;
  cast to ``jsonb`` for containment and the other ``jsonb`` operators.
* ``log_head``: one row holding the ``seq`` of the last change committed. Every batch moves it
  from the ``seq`` before its first change to its last, with a compare-and-set in the batch's
  transaction (``PostgresStore``): a second process writing the same database is refused,
  never interleaved.

All migrations pending run in one transaction, under a transaction-level advisory lock, so two
processes opening a new database at once migrate it once.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

#: The entity tables, in the order the DuckDB store gained them.
ENTITY_TABLES_V1 = (
    "identities",
    "authenticators",
    "enrollments",
    "api_sessions",
    "services",
    "config_types",
    "configs",
    "edge_routers",
    "transit_routers",
    "service_policies",
    "edge_router_policies",
    "service_edge_router_policies",
    "posture_checks",
    "cas",
    "external_jwt_signers",
    "auth_policies",
    "api_session_certificates",
    "sessions",
    "terminators",
    "mfas",
)

CHANGE_LOG_TABLE = "change_log"
LOG_HEAD_TABLE = "log_head"
SETTINGS_TABLE = "settings"
MIGRATIONS_TABLE = "schema_migrations"

#: The advisory lock key migrations take (``pg_advisory_xact_lock``): "trellis" in ASCII.
MIGRATION_LOCK = 0x7472656C6C6973
#: The cluster's write token (``pg_advisory_lock``, held by one process's token connection).
WRITE_TOKEN_LOCK = MIGRATION_LOCK + 1
#: Held by the one process that runs the control listener and the maintenance ticker.
LEAD_LOCK = MIGRATION_LOCK + 2
#: ``NOTIFY`` channels: a batch committed (payload: its last ``seq``), and the write token wanted
#: (payload: the waiting process's ``origin``). Hints only: the log is the truth.
LOG_CHANNEL = "trellis_log"
TOKEN_CHANNEL = "trellis_token"


def table_name(entity: str) -> str:
    """The table of an entity kind (``edge-routers`` -> ``edge_routers``), as in DuckDB."""
    return entity.replace("-", "_")


def _v1(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """Every table the DuckDB store's migrations 1 to 5 make, at once.

    ``change_log``: ``seq`` numbers changes without gaps in commit order; ``batch`` is the
    ``seq`` of the batch's last change (a follower applies whole batches); ``kind`` the entity's
    table; ``op`` ``put`` (``doc`` the entity as its table holds it) or ``delete`` (``doc``
    NULL); ``origin`` the process that wrote it (``host:pid:random``: a commit whose answer was
    lost is looked up by it); ``committed_at`` the commit's time (``now()``: the transaction's
    start, one per batch).
    ``log_head``: one row, ``seq`` the last change committed (0 for none).
    """
    for table in ENTITY_TABLES_V1:
        cur.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, doc json NOT NULL)")
    cur.execute(f"CREATE TABLE {SETTINGS_TABLE} (key text PRIMARY KEY, value text NOT NULL)")
    cur.execute(
        f"CREATE TABLE {CHANGE_LOG_TABLE} (seq bigint PRIMARY KEY, batch bigint NOT NULL, "
        "kind text NOT NULL, id text NOT NULL, op text NOT NULL CHECK (op IN ('put', 'delete')), "
        "doc json, origin text NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
        "CHECK ((op = 'put') = (doc IS NOT NULL)))"
    )
    cur.execute(
        f"CREATE TABLE {LOG_HEAD_TABLE} (id integer PRIMARY KEY CHECK (id = 1), "
        "seq bigint NOT NULL CHECK (seq >= 0))"
    )
    cur.execute(f"INSERT INTO {LOG_HEAD_TABLE} (id, seq) VALUES (1, 0)")


def _v2(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """The guesses ledger every process shares (:mod:`storage.postgres.attempts`), ``UNLOGGED``:
    ``attempts`` per key its failures, its guesses being checked (``pending``, the last taken at
    ``pending_at``) and the time before which a backoff refuses (``blocked_until``), times in
    seconds since the epoch; ``attempt_claims`` the last value claimed per key (TOTP steps)."""
    cur.execute(
        "CREATE UNLOGGED TABLE attempts (key text PRIMARY KEY, failures integer NOT NULL DEFAULT 0, "
        "pending integer NOT NULL DEFAULT 0, pending_at double precision NOT NULL DEFAULT 0, "
        "blocked_until double precision NOT NULL DEFAULT 0)"
    )
    cur.execute(
        "CREATE UNLOGGED TABLE attempt_claims (key text PRIMARY KEY, value bigint NOT NULL, "
        "at double precision NOT NULL)"
    )


def _v3(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """API sessions' last use as the processes share it (:mod:`storage.postgres.activity`),
    ``UNLOGGED``: outside the change log, the later time of each session kept."""
    cur.execute("CREATE UNLOGGED TABLE api_session_activity (id text PRIMARY KEY, at timestamptz NOT NULL)")


def _v4(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """The routers connected to each process (:mod:`storage.postgres.fleet`), ``UNLOGGED``: one
    row per process, its fleet as JSON, until ``expires_at`` unless the process renews it."""
    cur.execute(
        "CREATE UNLOGGED TABLE fleet_state (owner text PRIMARY KEY, state jsonb NOT NULL, "
        "expires_at timestamptz NOT NULL)"
    )


def _v5(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """Identities' posture data as the processes share it (:mod:`storage.postgres.posture`),
    ``UNLOGGED``: the latest state of each identity, who published it, and a number from
    ``posture_changes`` that orders the publications (what a process has not read yet)."""
    cur.execute("CREATE SEQUENCE posture_changes")
    cur.execute(
        "CREATE UNLOGGED TABLE posture_data (identity_id text PRIMARY KEY, owner text NOT NULL, "
        "state jsonb NOT NULL, changed bigint NOT NULL)"
    )
    cur.execute("CREATE INDEX posture_data_changed ON posture_data (changed)")


#: The entity tables later migrations add (v6: the controllers of the network; v8: the access
#: analysis's guardrails and their recorded violations; v9: the access
#: analysis's findings and archive rules).
ENTITY_TABLES_LATER = (
    "controllers",
    "guardrails",
    "guardrail_violations",
    "findings",
    "finding_archive_rules",
)


def _v6(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """The controllers of the network (``engine.entities.controllers``), as the DuckDB store's
    migration 6: a record per controller, written when it starts, kept until an operator removes
    it."""
    cur.execute("CREATE TABLE controllers (id text PRIMARY KEY, doc json NOT NULL)")


def _v7(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """What clients spend of their request budgets on each process (:mod:`storage.postgres.rates`),
    ``UNLOGGED``: a row per process, round, kind and client key with the requests admitted (and a
    row per process and round with none, saying it is there), kept seconds."""
    cur.execute(
        "CREATE UNLOGGED TABLE rate_spent (id bigserial PRIMARY KEY, owner text NOT NULL, "
        "kind text NOT NULL, key text NOT NULL, spent integer NOT NULL, "
        "at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )
    cur.execute("CREATE INDEX rate_spent_at ON rate_spent (at)")


def _v8(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """The access analysis's guardrails and their recorded violations, as the DuckDB store's
    migration 7."""
    for table in ("guardrails", "guardrail_violations"):
        cur.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, doc json NOT NULL)")


def _v9(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """The access analysis's findings and archive rules, as the DuckDB store's migration 8."""
    for table in ("findings", "finding_archive_rules"):
        cur.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, doc json NOT NULL)")


def _v10(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
    """The access changes of each access-relevant batch, as the DuckDB store's migration 9."""
    cur.execute(
        "CREATE TABLE access_changes (revision bigint PRIMARY KEY, prev bigint NOT NULL, "
        "committed_us bigint NOT NULL, pairs bigint NOT NULL, doc bytea NOT NULL)"
    )


Migration = Callable[["psycopg.Cursor[tuple[object, ...]]"], None]
MIGRATIONS: list[tuple[int, Migration]] = [
    (1, _v1),
    (2, _v2),
    (3, _v3),
    (4, _v4),
    (5, _v5),
    (6, _v6),
    (7, _v7),
    (8, _v8),
    (9, _v9),
    (10, _v10),
]
LATEST = MIGRATIONS[-1][0]


class SchemaTooNewError(RuntimeError):
    """The database was migrated by a newer Trellis than this one."""


def migrate(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """Apply every migration newer than the database's version, all in one transaction; return
    the final version. ``conn`` is in autocommit mode (the transaction is this function's)."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur.execute(f"SELECT coalesce(max(version), 0) FROM {MIGRATIONS_TABLE}")
        row = cur.fetchone()
        current = int(str(row[0])) if row else 0
        if current > LATEST:
            raise SchemaTooNewError(
                f"the database has schema version {current}; this Trellis knows up to {LATEST}"
            )
        for version, step in MIGRATIONS:
            if version <= current:
                continue
            step(cur)
            cur.execute(f"INSERT INTO {MIGRATIONS_TABLE} (version) VALUES (%s)", [version])
            current = version
    return current
