"""Settings from the environment, read once by the composition root."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    home: Path = Path(".trellis")
    bind: str = "127.0.0.1:1280"
    #: host:port clients use to reach the API (enrollment JWT ``iss``, ``apiBaseUrls``).
    advertise: str = ""
    sans: tuple[str, ...] = ()
    session_timeout: timedelta = timedelta(minutes=30)
    enrollment_duration: timedelta = timedelta(minutes=180)
    max_body_bytes: int = 1024 * 1024
    db_memory_limit: str = "1GB"
    #: Where the database's statements run once loaded: ``process`` (a writer process of its own,
    #: off the request threads' GIL) or ``thread`` (the committer thread). See storage.duckdb.writer.
    db_writer: str = "process"
    #: A batch is durable once in the journal, and put into the database's tables after (many
    #: batches to a transaction); off: once its own DuckDB transaction commits. See
    #: storage.duckdb.journal.
    db_journal: bool = True
    #: Change-log entries kept after a checkpoint (what a replica may still catch up from).
    change_log_retain: int = 100_000
    threads: int = 16
    #: Addresses (or CIDR blocks) of TLS-terminating proxies whose ``X-Client-CertPem`` is believed.
    cert_proxies: tuple[str, ...] = ()
    #: The serving worker's time limits, in seconds (``keepalive_timeout`` 0 turns keep-alive off).
    handshake_timeout: float = 10.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    write_timeout: float = 30.0
    keepalive_timeout: float = 5.0
    #: Per-client request budgets (token buckets; 0 requests per minute turns one off):
    #: authentication (``/authenticate``, ``/authenticate/mfa``, enrollment, MFA verification) per
    #: client address, and writes (POST/PUT/PATCH/DELETE) per API session, else per address.
    rate_auth_per_minute: int = 600
    rate_auth_burst: int = 600
    rate_write_per_minute: int = 30000
    rate_write_burst: int = 5000
    #: MFA code guesses per identity (every operation that takes a code): this many wrong codes
    #: free, then one at a time, the wait doubling from ``mfa_backoff`` to ``mfa_backoff_max``
    #: seconds after each further wrong one; a right code clears it.
    mfa_free_failures: int = 10
    mfa_backoff: float = 30.0
    mfa_backoff_max: float = 3600.0
    #: A request's time budget in the app (0: none); long operations check it and answer 503.
    request_timeout: float = 30.0
    #: How often the serving process deletes expired API sessions (and their sessions).
    purge_interval: float = 60.0
    #: Seconds between sweeps ending sessions that no longer pass posture (OpenZiti: 5).
    posture_interval: float = 5.0
    #: Origins (``scheme://host[:port]``) answered with CORS headers; none: CORS off.
    cors_origins: tuple[str, ...] = ()
    #: External JWT signers' JWKS endpoints may be on loopback addresses (an identity provider on
    #: the controller's own host); off: such endpoints are refused when set and when fetched.
    jwks_allow_loopback: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def db_path(self) -> Path:
        return self.home / "trellis.duckdb"

    @property
    def pki_dir(self) -> Path:
        return self.home / "pki"

    @property
    def advertised_address(self) -> str:
        if self.advertise:
            return self.advertise
        host, _, port = self.bind.rpartition(":")
        if host in ("", "0.0.0.0", "::", "[::]"):
            host = "localhost"
        return f"{host}:{port}"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        timeout = int(env.get("TRELLIS_SESSION_TIMEOUT_MINUTES", "30"))
        limits = {key: _seconds(env, name, default) for name, (key, default) in TIMEOUT_VARIABLES.items()}
        return cls(
            home=Path(env.get("TRELLIS_HOME", ".trellis")),
            bind=env.get("TRELLIS_BIND", "127.0.0.1:1280"),
            advertise=env.get("TRELLIS_ADVERTISE", ""),
            sans=tuple(s.strip() for s in env.get("TRELLIS_SAN", "").split(",") if s.strip()),
            session_timeout=timedelta(minutes=max(1, timeout)),
            db_memory_limit=env.get("TRELLIS_DB_MEMORY_LIMIT", "1GB"),
            db_writer=_choice(env, "TRELLIS_DB_WRITER", ("process", "thread")),
            db_journal=_choice(env, "TRELLIS_DB_JOURNAL", ("on", "off")) == "on",
            change_log_retain=max(1, _count(env, "TRELLIS_CHANGE_LOG_RETAIN", 100_000)),
            threads=int(env.get("TRELLIS_THREADS", "16")),
            cert_proxies=tuple(
                s.strip() for s in env.get("TRELLIS_CERT_PROXIES", "").split(",") if s.strip()
            ),
            handshake_timeout=limits["handshake_timeout"],
            header_timeout=limits["header_timeout"],
            body_timeout=limits["body_timeout"],
            write_timeout=limits["write_timeout"],
            keepalive_timeout=limits["keepalive_timeout"],
            rate_auth_per_minute=_count(env, "TRELLIS_RATE_AUTH_PER_MINUTE", 600),
            rate_auth_burst=_count(env, "TRELLIS_RATE_AUTH_BURST", 600),
            rate_write_per_minute=_count(env, "TRELLIS_RATE_WRITE_PER_MINUTE", 30000),
            rate_write_burst=_count(env, "TRELLIS_RATE_WRITE_BURST", 5000),
            mfa_free_failures=max(1, _count(env, "TRELLIS_MFA_FREE_FAILURES", 10)),
            mfa_backoff=_seconds(env, "TRELLIS_MFA_BACKOFF_SECONDS", 30.0),
            mfa_backoff_max=_seconds(env, "TRELLIS_MFA_BACKOFF_MAX_SECONDS", 3600.0),
            request_timeout=_seconds(env, "TRELLIS_REQUEST_TIMEOUT_SECONDS", 30.0, allow_zero=True),
            purge_interval=_seconds(env, "TRELLIS_PURGE_INTERVAL_SECONDS", 60.0),
            posture_interval=_seconds(env, "TRELLIS_POSTURE_INTERVAL_SECONDS", 5.0),
            cors_origins=parse_origins(env.get("TRELLIS_CORS_ORIGINS", "")),
            jwks_allow_loopback=_choice(env, "TRELLIS_JWKS_ALLOW_LOOPBACK", ("off", "on")) == "on",
        )


def _choice(env: dict[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (the first is the default), any case; anything else stops the start."""
    raw = env.get(name, "").strip().lower() or choices[0]
    if raw not in choices:
        raise SystemExit(f"{name} must be one of {', '.join(choices)}, not {env.get(name)!r}")
    return raw


#: The serving time limits' variables: name -> (Settings field, default seconds).
TIMEOUT_VARIABLES = {
    "TRELLIS_TIMEOUT_HANDSHAKE_SECONDS": ("handshake_timeout", 10.0),
    "TRELLIS_TIMEOUT_HEADER_SECONDS": ("header_timeout", 10.0),
    "TRELLIS_TIMEOUT_BODY_SECONDS": ("body_timeout", 30.0),
    "TRELLIS_TIMEOUT_WRITE_SECONDS": ("write_timeout", 30.0),
    "TRELLIS_TIMEOUT_KEEPALIVE_SECONDS": ("keepalive_timeout", 5.0),
}


def _seconds(env: dict[str, str], name: str, default: float, *, allow_zero: bool = False) -> float:
    """A positive number of seconds (0 allowed where it turns a limit off: keep-alive, ``allow_zero``)."""
    raw = env.get(name, "")
    try:
        seconds = float(raw) if raw.strip() else default
    except ValueError:
        raise SystemExit(f"{name} must be a number of seconds, not {raw!r}") from None
    zero_ok = allow_zero or name == "TRELLIS_TIMEOUT_KEEPALIVE_SECONDS"
    if seconds != seconds or seconds < 0 or (seconds == 0 and not zero_ok):
        raise SystemExit(f"{name} must be more than 0 seconds")
    return seconds


def _count(env: dict[str, str], name: str, default: int) -> int:
    """A whole number, 0 or more."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or len(raw) > 12:
        raise SystemExit(f"{name} must be a whole number (0 or more), not {raw!r}")
    return int(raw)


def parse_origins(raw: str) -> tuple[str, ...]:
    """A comma-separated CORS allow-list, each origin normalised (lowercase, no trailing slash).

    An origin is ``scheme://host[:port]`` exactly as browsers send it; ``*`` allows any origin
    (answered ``Access-Control-Allow-Origin: *``, never with credentials).
    """
    out: list[str] = []
    for part in raw.split(","):
        origin = part.strip().rstrip("/").lower()
        if not origin:
            continue
        if origin != "*":
            scheme, sep, rest = origin.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or any(c in rest for c in "/?#@ "):
                raise SystemExit(
                    f"TRELLIS_CORS_ORIGINS: {part.strip()!r} is not an origin (scheme://host[:port])"
                )
        if origin not in out:
            out.append(origin)
    return tuple(out)
