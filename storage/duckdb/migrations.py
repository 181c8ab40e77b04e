"""Numbered schema migrations. Never edit a released migration: add the next number.

Each entity kind has a table ``(id VARCHAR PRIMARY KEY, doc JSON NOT NULL)``: the entity's
fields as a JSON document (role attributes as JSON arrays, see docs/architecture.md §5 on ``VARCHAR[]``).
DuckDB's JSON functions make every field available to SQL analysis, e.g.
``select id, doc->>'name' from identities``.

A migration that must overwrite secrets records a task in the ``maintenance`` table (v2 on): the
store finishes it after migrating (see ``DuckDBStore``), outside the migration's transaction.
"""

from __future__ import annotations

import duckdb

ENTITY_TABLES_V1 = [
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
]


#: Tasks a migration leaves for the store to finish outside the migration's transaction.
MAINTENANCE_TABLE = "maintenance"
#: Rewrite the database file so that no overwritten value survives in its freed blocks.
COMPACT_TASK = "compact"


def _v1(con: duckdb.DuckDBPyConnection) -> None:
    for table in ENTITY_TABLES_V1:
        con.execute(f"CREATE TABLE {table} (id VARCHAR PRIMARY KEY, doc JSON NOT NULL)")
    con.execute("CREATE TABLE settings (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)")


def _v2(con: duckdb.DuckDBPyConnection) -> None:
    """Ephemeral API-session certificates; API-session tokens kept only as their SHA-256.

    A v1 ``api_sessions`` document holds the plain ``token``: it becomes ``token_hash`` (the
    lowercase hex SHA-256 of the token's UTF-8 bytes, as ``engine.managers.api_sessions.token_hash``
    computes it), so sessions open before the upgrade keep working. A session without a usable
    token could never be presented (nor decoded) and is dropped.

    DuckDB leaves overwritten values in the file's freed blocks, so when any token was rewritten
    a ``compact`` task is recorded in the same transaction: the store then rewrites the file
    (``DuckDBStore``) and the task is removed only together with the old file.
    """
    con.execute("CREATE TABLE api_session_certificates (id VARCHAR PRIMARY KEY, doc JSON NOT NULL)")
    con.execute(f"CREATE TABLE {MAINTENANCE_TABLE} (task VARCHAR PRIMARY KEY)")
    con.execute(
        f"INSERT INTO {MAINTENANCE_TABLE} (task) SELECT ? "
        "WHERE EXISTS (SELECT 1 FROM api_sessions WHERE json_exists(doc, '$.token'))",
        [COMPACT_TASK],
    )
    # json_merge_patch removes a key patched with null (RFC 7386).
    con.execute(
        "UPDATE api_sessions SET doc = json_merge_patch("
        "doc, json_object('token', NULL, 'token_hash', sha256(doc->>'token'))) "
        "WHERE doc->>'token' IS NOT NULL"
    )
    con.execute("DELETE FROM api_sessions WHERE doc->>'token_hash' IS NULL")


def _v3(con: duckdb.DuckDBPyConnection) -> None:
    """Dial/Bind sessions, service terminators and identities' MFA enrollments."""
    for table in ("sessions", "terminators", "mfas"):
        con.execute(f"CREATE TABLE {table} (id VARCHAR PRIMARY KEY, doc JSON NOT NULL)")


#: The change log: every committed change in order, in the transaction of its batch.
CHANGE_LOG_TABLE = "change_log"


def _v4(con: duckdb.DuckDBPyConnection) -> None:
    """The change log of the group-commit write path (docs/architecture.md §7: what replicas will follow).

    ``seq`` numbers changes without gaps in commit order; ``kind`` is the entity kind (its table
    name); ``op`` is ``put`` (``doc`` the entity as its table holds it) or ``delete`` (``doc``
    NULL); ``batch`` is the ``seq`` of the batch's last change, so a follower applies whole
    batches. It is trimmed to the newest entries after checkpoints (``DuckDBStore``).
    """
    con.execute(
        f"CREATE TABLE {CHANGE_LOG_TABLE} (seq BIGINT PRIMARY KEY, batch BIGINT NOT NULL, "
        "kind VARCHAR NOT NULL, id VARCHAR NOT NULL, op VARCHAR NOT NULL CHECK (op IN ('put', 'delete')), "
        "doc JSON, CHECK ((op = 'put') = (doc IS NOT NULL)))"
    )


def _v5(con: duckdb.DuckDBPyConnection) -> None:
    """SDK-hosted terminators' addresses become their own ids (as OpenZiti 1.x's).

    Before, a terminator an SDK's Bind made (binding ``edge``) had the address
    ``hosted:<Bind session token>``, so every administrator listing terminators could read the
    tokens of Bind sessions. The table and the change log are rewritten, and a ``compact`` task
    recorded when anything was, so that no token survives in the file's freed blocks (as v2).
    """
    hosted = "doc->>'binding' = 'edge' AND starts_with(doc->>'address', 'hosted:')"
    con.execute(
        f"INSERT INTO {MAINTENANCE_TABLE} (task) SELECT ? WHERE NOT EXISTS "
        f"(SELECT 1 FROM {MAINTENANCE_TABLE} WHERE task = ?) AND ("
        f"EXISTS (SELECT 1 FROM terminators WHERE {hosted}) OR "
        f"EXISTS (SELECT 1 FROM {CHANGE_LOG_TABLE} WHERE kind = 'terminators' AND op = 'put' AND {hosted}))",
        [COMPACT_TASK, COMPACT_TASK],
    )
    con.execute(
        f"UPDATE terminators SET doc = json_merge_patch(doc, json_object('address', id)) WHERE {hosted}"
    )
    con.execute(
        f"UPDATE {CHANGE_LOG_TABLE} SET doc = json_merge_patch(doc, json_object('address', id)) "
        f"WHERE kind = 'terminators' AND op = 'put' AND {hosted}"
    )


def _v6(con: duckdb.DuckDBPyConnection) -> None:
    """The controllers of the network (``engine.entities.controllers``): a record per controller,
    written when it starts, kept until an operator removes it."""
    con.execute("CREATE TABLE controllers (id VARCHAR PRIMARY KEY, doc JSON NOT NULL)")


def _v7(con: duckdb.DuckDBPyConnection) -> None:
    """The access analysis's guardrails (``engine.entities.guardrails``): named invariants over
    access, and the violations of those in ``report`` mode."""
    for table in ("guardrails", "guardrail_violations"):
        con.execute(f"CREATE TABLE {table} (id VARCHAR PRIMARY KEY, doc JSON NOT NULL)")


def _v8(con: duckdb.DuckDBPyConnection) -> None:
    """The access analysis's findings (``engine.entities.findings``): each finding's lifecycle
    record, and the rules that archive findings."""
    for table in ("findings", "finding_archive_rules"):
        con.execute(f"CREATE TABLE {table} (id VARCHAR PRIMARY KEY, doc JSON NOT NULL)")


def _v9(con: duckdb.DuckDBPyConnection) -> None:
    """The access changes of each access-relevant batch (``storage.access_changes``, for the
    change stream of docs/analysis.md §15): its revision, the previous access-relevant revision,
    the commit time in microseconds since the epoch, the pairs it changed and the record itself
    (compressed JSON), kept for ``TRELLIS_ACCESS_CHANGES_RETAIN_DAYS``."""
    con.execute(
        "CREATE TABLE access_changes (revision BIGINT PRIMARY KEY, prev BIGINT NOT NULL, "
        "committed_us BIGINT NOT NULL, pairs BIGINT NOT NULL, doc BLOB NOT NULL)"
    )


MIGRATIONS = [(1, _v1), (2, _v2), (3, _v3), (4, _v4), (5, _v5), (6, _v6), (7, _v7), (8, _v8), (9, _v9)]


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Apply every migration newer than the database's version; return the final version."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
        "applied_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp)"
    )
    row = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    current = int(row[0]) if row else 0
    for version, step in MIGRATIONS:
        if version <= current:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            step(con)
            con.execute("INSERT INTO schema_migrations (version) VALUES (?)", [version])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        current = version
    return current


def pending_tasks(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The maintenance tasks migrations have recorded and the store has not finished."""
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = current_schema() AND table_name = ?",
        [MAINTENANCE_TABLE],
    ).fetchone()
    if not exists or not exists[0]:
        return set()
    return {str(row[0]) for row in con.execute(f"SELECT task FROM {MAINTENANCE_TABLE}").fetchall()}


def table_name(entity: str) -> str:
    """The table of an entity kind (``edge-routers`` -> ``edge_routers``)."""
    return entity.replace("-", "_")
