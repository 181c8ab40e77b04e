"""DuckDB persistence: numbered migrations, the write-through store, snapshots and restore."""

from storage.duckdb.store import DuckDBStore, RestoreError, restore_snapshot, snapshot_path

__all__ = ["DuckDBStore", "RestoreError", "restore_snapshot", "snapshot_path"]
