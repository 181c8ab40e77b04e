"""DuckDB persistence: numbered migrations and the write-through store."""

from storage.duckdb.store import DuckDBStore

__all__ = ["DuckDBStore"]
