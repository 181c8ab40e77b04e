"""Numbered schema migrations. Never edit a released migration: add the next number.

Each entity kind has a table ``(id VARCHAR PRIMARY KEY, doc JSON NOT NULL)``: the entity's
fields as a JSON document (role attributes as JSON arrays, see design.md §5 on ``VARCHAR[]``).
DuckDB's JSON functions make every field available to SQL analysis, e.g.
``select id, doc->>'name' from identities``.
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


def _v1(con: duckdb.DuckDBPyConnection) -> None:
    for table in ENTITY_TABLES_V1:
        con.execute(f"CREATE TABLE {table} (id VARCHAR PRIMARY KEY, doc JSON NOT NULL)")
    con.execute("CREATE TABLE settings (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)")


MIGRATIONS = [(1, _v1)]


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


def table_name(entity: str) -> str:
    """The table of an entity kind (``edge-routers`` -> ``edge_routers``)."""
    return entity.replace("-", "_")
