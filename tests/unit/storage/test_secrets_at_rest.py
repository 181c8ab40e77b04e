"""Secrets at rest in the DuckDB store: private file modes, session tokens only as hashes."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import orjson
import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import ApiSession, ApiSessionCertificate
from engine.managers.api_sessions import token_hash
from engine.ports import Put
from storage.duckdb import DuckDBStore, migrations
from storage.duckdb.store import tighten, wal_path

TOKEN = "5f0c2a4e-9b1d-4c3e-8a7f-plain-session-token"
OTHER_TOKEN = "0d9e8f7a-6b5c-4d3e-2f1a-second-session-token"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def umask() -> Iterator[None]:
    """Start each test with a permissive umask (022) and restore the runner's afterwards."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _v1_session(token: str) -> str:
    """An ``api_sessions`` document as version 1 wrote it: the plain token."""
    return orjson.dumps(
        {
            "authenticator_id": "auth-1",
            "config_types": ["all"],
            "created_at": "2026-03-04T05:06:07.123000+00:00",
            "identity_id": "id-1",
            "ip_address": "10.0.0.1",
            "is_mfa_complete": False,
            "is_mfa_required": False,
            "last_activity_at": "2026-03-04T05:06:07.123000+00:00",
            "tags": {},
            "token": token,
            "updated_at": "2026-03-04T05:06:07.123000+00:00",
        }
    ).decode()


def _v1_database(path: Path, monkeypatch: pytest.MonkeyPatch, sessions: dict[str, str]) -> None:
    """A database at schema version 1 (only migration 1 run) holding ``sessions`` (id -> doc)."""
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:1])
        con = duckdb.connect(str(path))
        assert migrations.migrate(con) == 1
    for session_id, doc in sessions.items():
        con.execute("INSERT INTO api_sessions (id, doc) VALUES (?, ?)", [session_id, doc])
    # Many rows besides, so the sessions share the file with other data as in real life.
    con.execute("INSERT INTO settings SELECT 'filler-' || i, repeat('x', 100) FROM range(2000) t(i)")
    con.close()


def _files_containing(directory: Path, needle: str) -> list[str]:
    return [p.name for p in directory.iterdir() if p.is_file() and needle.encode() in p.read_bytes()]


def test_migration_2_keeps_v1_sessions_working_and_leaves_no_plain_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.duckdb"
    _v1_database(path, monkeypatch, {"s1": _v1_session(TOKEN), "s2": _v1_session(OTHER_TOKEN)})
    assert _files_containing(tmp_path, TOKEN) == ["t.duckdb"]  # the test would prove nothing otherwise

    store = DuckDBStore(path)
    assert store.schema_version == migrations.MIGRATIONS[-1][0]
    session = store.get(ApiSession, "s1")
    assert session is not None
    assert session.token_hash == hashlib.sha256(TOKEN.encode()).hexdigest() == token_hash(TOKEN)
    assert session.identity_id == "id-1"
    assert session.ip_address == "10.0.0.1"
    assert session.config_types == ["all"]
    assert store.find_unique(ApiSession, "token_hash", token_hash(OTHER_TOKEN)) == store.get(ApiSession, "s2")
    doc = store._con.execute("SELECT doc FROM api_sessions WHERE id = 's1'").fetchone()
    assert doc is not None
    assert "token" not in orjson.loads(doc[0])
    assert migrations.pending_tasks(store._con) == set()
    store.close()

    for token in (TOKEN, OTHER_TOKEN):
        assert _files_containing(tmp_path, token) == []
    reopened = DuckDBStore(path)
    assert reopened.get(ApiSession, "s1") == session
    assert reopened.get_setting("filler-1999") == "x" * 100
    reopened.close()


def test_an_interrupted_compaction_is_finished_at_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 2 committed but the process died before rewriting the file: the next open does it."""
    path = tmp_path / "t.duckdb"
    _v1_database(path, monkeypatch, {"s1": _v1_session(TOKEN)})
    con = duckdb.connect(str(path))
    assert migrations.migrate(con) == migrations.MIGRATIONS[-1][0]
    assert migrations.pending_tasks(con) == {migrations.COMPACT_TASK}
    con.close()
    assert _files_containing(tmp_path, TOKEN) == ["t.duckdb"]  # DuckDB keeps freed blocks' bytes

    store = DuckDBStore(path)
    assert store.get(ApiSession, "s1") is not None
    store.close()
    assert _files_containing(tmp_path, TOKEN) == []


def test_a_session_without_a_token_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.duckdb"
    tokenless = orjson.loads(_v1_session(TOKEN))
    tokenless["token"] = None
    _v1_database(path, monkeypatch, {"s1": _v1_session(TOKEN), "s2": orjson.dumps(tokenless).decode()})
    store = DuckDBStore(path)
    assert [s.id for s in store.all(ApiSession)] == ["s1"]
    store.close()


def test_a_new_database_is_not_compacted(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    store = DuckDBStore(path)
    assert migrations.pending_tasks(store._con) == set()
    tables = {row[0] for row in store._con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert {"api_sessions", "api_session_certificates", "maintenance"} <= tables
    store.close()
    inode = path.stat().st_ino
    DuckDBStore(path).close()
    assert path.stat().st_ino == inode  # not rewritten


def test_api_session_certificates_persist(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    cert = ApiSessionCertificate(
        id="c1",
        created_at=now,
        updated_at=now,
        api_session_id="s1",
        identity_id="id-1",
        subject="CN=x",
        cert_pem="-----BEGIN CERTIFICATE-----\n",
        fingerprint="ab" * 20,
        valid_from=now,
        valid_to=now,
    )
    store = DuckDBStore(tmp_path / "t.duckdb")
    store.commit([Put(cert)])
    store.close()
    reopened = DuckDBStore(tmp_path / "t.duckdb")
    assert reopened.get(ApiSessionCertificate, "c1") == cert
    reopened.close()


def test_directory_database_and_wal_are_private_from_the_start(tmp_path: Path) -> None:
    home = tmp_path / "a" / "home"
    path = home / "t.duckdb"
    store = DuckDBStore(path)
    assert _mode(home) == 0o700
    assert _mode(path) == 0o600
    for i in range(2):  # the WAL is deleted by a checkpoint and created again by the next write
        store.put_setting("k", f"v{i}")
        assert _mode(wal_path(path)) == 0o600
        store._con.execute("CHECKPOINT")
        assert not wal_path(path).exists()
    store.close()
    assert _mode(path) == 0o600
    assert os.umask(0o022) & 0o077 == 0o077  # the store left the process creating private files


def test_umask_is_only_tightened(tmp_path: Path) -> None:
    os.umask(0o027)
    DuckDBStore(tmp_path / "a.duckdb").close()
    assert os.umask(0o277) == 0o077
    DuckDBStore(tmp_path / "b.duckdb").close()
    assert os.umask(0o022) == 0o277


def test_an_existing_install_is_tightened(tmp_path: Path) -> None:
    """A database directory, database and WAL left group/other-readable are tightened on open."""
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    path = home / "t.duckdb"
    DuckDBStore(path).close()
    # Leave a WAL behind as a crash would, created under umask 022.
    script = textwrap.dedent(
        f"""
        import os
        import duckdb
        os.umask(0o022)
        con = duckdb.connect({str(path)!r})
        con.execute("INSERT INTO settings VALUES ('k', 'v')")
        os.kill(os.getpid(), 9)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == -9, done.stderr
    path.chmod(0o644)
    wal_path(path).chmod(0o644)
    home.chmod(0o755)
    assert _mode(wal_path(path)) == 0o644

    store = DuckDBStore(path)
    assert store.get_setting("k") == "v"  # the WAL was replayed
    assert _mode(home) == 0o700
    assert _mode(path) == 0o600
    assert wal_path(path).exists()
    assert _mode(wal_path(path)) == 0o600
    store.close()


def test_tighten_keeps_owner_bits_and_leaves_shared_directories_and_symlinks(tmp_path: Path) -> None:
    exe = tmp_path / "exe"
    exe.write_text("")
    exe.chmod(0o755)
    tighten(exe)
    assert _mode(exe) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    tighten(shared)
    assert _mode(shared) == 0o1777
    target = tmp_path / "target"
    target.write_text("")
    target.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(target)
    tighten(link)
    assert _mode(target) == 0o644
    tighten(tmp_path / "missing")


def test_a_failed_compaction_keeps_serving_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.duckdb"
    _v1_database(path, monkeypatch, {"s1": _v1_session(TOKEN)})

    def refuse(*args: object) -> None:
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", refuse)
        store = DuckDBStore(path)
    assert "could not compact" in caplog.text
    assert store.get(ApiSession, "s1") is not None
    assert migrations.pending_tasks(store._con) == {migrations.COMPACT_TASK}
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.duckdb"]  # no half-made copy left

    DuckDBStore(path).close()
    assert _files_containing(tmp_path, TOKEN) == []


def _terminator(id: str, binding: str, address: str) -> str:
    from engine.entities.services import Terminator
    from storage.codec import encode

    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    return encode(
        Terminator(
            id=id,
            created_at=when,
            updated_at=when,
            service_id="svc",
            router_id="r1",
            binding=binding,
            address=address,
        )
    )


def test_migration_5_replaces_hosted_terminator_addresses_and_leaves_no_bind_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Bind session's token was an SDK-hosted terminator's address before: v5 makes it the id."""
    from engine.entities.services import Terminator

    path = tmp_path / "t.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:4])
        con = duckdb.connect(str(path))
        assert migrations.migrate(con) == 4
    hosted = _terminator("t1", "edge", f"hosted:{TOKEN}")
    con.execute(
        "INSERT INTO terminators (id, doc) VALUES ('t1', ?), ('t2', ?)",
        [hosted, _terminator("t2", "transport", "tcp:h:80")],
    )
    con.execute("INSERT INTO change_log VALUES (1, 1, 'terminators', 't1', 'put', ?)", [hosted])
    con.execute("INSERT INTO settings SELECT 'filler-' || i, repeat('x', 100) FROM range(2000) t(i)")
    con.close()
    assert _files_containing(tmp_path, TOKEN) == ["t.duckdb"]

    store = DuckDBStore(path)
    first = store.get(Terminator, "t1")
    other = store.get(Terminator, "t2")
    assert first is not None
    assert other is not None
    assert (first.address, first.binding) == ("t1", "edge")
    assert other.address == "tcp:h:80"
    store.close()
    assert _files_containing(tmp_path, TOKEN) == []
