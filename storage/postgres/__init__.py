"""PostgreSQL persistence (``TRELLIS_DATABASE_URL``): numbered migrations and the write-through store."""

from storage.postgres.store import (
    DatabaseUrlError,
    LogHeadMovedError,
    PostgresStore,
    StoreOpenError,
    describe,
    parse_url,
    probe,
)

__all__ = [
    "DatabaseUrlError",
    "LogHeadMovedError",
    "PostgresStore",
    "StoreOpenError",
    "describe",
    "parse_url",
    "probe",
]
