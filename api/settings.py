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
    threads: int = 8
    #: Addresses (or CIDR blocks) of TLS-terminating proxies whose ``X-Client-CertPem`` is believed.
    cert_proxies: tuple[str, ...] = ()
    #: The serving worker's time limits, in seconds (``keepalive_timeout`` 0 turns keep-alive off).
    handshake_timeout: float = 10.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    write_timeout: float = 30.0
    keepalive_timeout: float = 5.0
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
            threads=int(env.get("TRELLIS_THREADS", "8")),
            cert_proxies=tuple(
                s.strip() for s in env.get("TRELLIS_CERT_PROXIES", "").split(",") if s.strip()
            ),
            handshake_timeout=limits["handshake_timeout"],
            header_timeout=limits["header_timeout"],
            body_timeout=limits["body_timeout"],
            write_timeout=limits["write_timeout"],
            keepalive_timeout=limits["keepalive_timeout"],
        )


#: The serving time limits' variables: name -> (Settings field, default seconds).
TIMEOUT_VARIABLES = {
    "TRELLIS_TIMEOUT_HANDSHAKE_SECONDS": ("handshake_timeout", 10.0),
    "TRELLIS_TIMEOUT_HEADER_SECONDS": ("header_timeout", 10.0),
    "TRELLIS_TIMEOUT_BODY_SECONDS": ("body_timeout", 30.0),
    "TRELLIS_TIMEOUT_WRITE_SECONDS": ("write_timeout", 30.0),
    "TRELLIS_TIMEOUT_KEEPALIVE_SECONDS": ("keepalive_timeout", 5.0),
}


def _seconds(env: dict[str, str], name: str, default: float) -> float:
    """A positive number of seconds (0 allowed only for keep-alive, where it turns it off)."""
    raw = env.get(name, "")
    try:
        seconds = float(raw) if raw.strip() else default
    except ValueError:
        raise SystemExit(f"{name} must be a number of seconds, not {raw!r}") from None
    if seconds != seconds or seconds < 0 or (seconds == 0 and name != "TRELLIS_TIMEOUT_KEEPALIVE_SECONDS"):
        raise SystemExit(f"{name} must be more than 0 seconds")
    return seconds
