"""Persistence behind the engine's ``Store`` port: DuckDB for real, memory for tests."""
