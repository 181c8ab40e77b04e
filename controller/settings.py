"""Settings from the environment: every ``TRELLIS_*`` variable declared once, here.

Each :class:`Setting` of :data:`SETTINGS` names its variable, the :class:`Settings` field it
fills, its default (written as one would set it), the parser that checks it, the form an error
asks for, its help, and the commands that read it. From that one list come:

- :meth:`Settings.from_env`, the only reader of the environment (the composition root calls it
  once): every variable parsed, a bad one refused with :class:`SettingError`, one line naming the
  variable, the form it takes and the value given
  (``TRELLIS_THREADS must be a whole number from 1 to 256, not 'abc'``);
- the :class:`Settings` fields' defaults (:data:`DEFAULTS`);
- ``trellis --help`` and each command's help (:func:`describe`);
- the settings table of docs/operations.md §2: ``python -m controller.settings --markdown``.

An empty variable is the same as an unset one (its default).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import sys
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any


class SettingError(SystemExit):
    """A setting (or what it names: the home, the address) cannot be used, in one line for the
    operator. The CLI prints it after ``trellis:`` and exits with status 2; elsewhere, as the
    :class:`SystemExit` it is, it ends the process with its message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class Invalid(ValueError):
    """Raised by a parser: the value is not of the setting's form (the message, if any, says more)."""


@dataclass(frozen=True)
class Setting:
    """One environment variable: where it goes, its default, how it is checked, what it means."""

    #: The environment variable.
    env: str
    #: The :class:`Settings` field it fills (None: read by the CLI itself, e.g. the password).
    field: str | None
    #: The default, as it would be set in the environment ("" for none).
    default: str
    #: The value's form, as errors and help name it ("a whole number from 1 to 256").
    form: str
    #: What it does, one line (Markdown backticks allowed).
    help: str
    #: Which commands read it.
    commands: tuple[str, ...] = ("serve",)
    #: Turns the (stripped, non-empty) text into the field's value; :class:`Invalid` if it can't.
    parser: Callable[[str], Any] = str
    #: The default as shown, when the raw default does not say it ("the bind address").
    shown_default: str = ""
    #: More for the settings table of docs/operations.md (Markdown).
    detail: str = ""

    def parse(self, raw: str | None) -> Any:
        """The value of ``raw`` (None or blank: the default), else :class:`SettingError`."""
        text = (raw or "").strip() or self.default
        try:
            return self.parser(text)
        except Invalid as ex:
            more = f" ({ex})" if str(ex) else ""
            raise SettingError(f"{self.env} must be {self.form}, not {raw!r}{more}") from None

    @property
    def default_text(self) -> str:
        return self.shown_default or self.default


# -- parsers -------------------------------------------------------------------------------------

#: The largest count a setting takes (budgets, retention): beyond it is a typo.
COUNT_MAX = 1_000_000_000
#: The longest time a setting takes, in seconds (a year): beyond it timers overflow.
SECONDS_MAX = 365 * 24 * 3600


def whole(low: int, high: int = COUNT_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isascii() or not text.isdigit() or len(text) > len(str(high)):
            raise Invalid()
        value = int(text)
        if not low <= value <= high:
            raise Invalid()
        return value

    return parse


def whole_form(low: int, high: int = COUNT_MAX, unit: str = "") -> str:
    return f"a whole number{unit} from {low} to {high}"


def seconds(*, zero: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise Invalid() from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero) or value > SECONDS_MAX:
            raise Invalid()
        return value

    return parse


def seconds_form(*, zero: bool = False) -> str:
    if zero:
        return f"a number of seconds from 0 (off) to {SECONDS_MAX}"
    return f"a number of seconds, more than 0 and at most {SECONDS_MAX}"


def choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise Invalid()
        return text.lower()

    return parse


def switch(text: str) -> bool:
    return choice("on", "off")(text) == "on"


def minutes(text: str) -> timedelta:
    return timedelta(minutes=whole(1, 525_600)(text))


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def is_host_name(text: str) -> bool:
    """A DNS name (``*.`` allowed first, for a certificate's name) or an IP address."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    labels = text.removesuffix(".").split(".")
    if labels[0] == "*" and len(labels) > 1:
        labels = labels[1:]
    return len(text) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)


def split_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as (host, port); :class:`Invalid` if it is not one."""
    if text.startswith("["):
        inside, sep, port = text[1:].partition("]:")
        try:
            ipaddress.IPv6Address(inside)
        except ValueError:
            raise Invalid() from None
        host = inside if sep else ""
    else:
        host, _, port = text.rpartition(":")
        if ":" in host:
            raise Invalid("an IPv6 address goes in brackets")
        if host and not is_host_name(host):
            raise Invalid()
    if not host or not port.isascii() or not port.isdigit() or len(port) > 5:
        raise Invalid()
    if not 1 <= int(port) <= 65535:
        raise Invalid(f"port {int(port)} is out of range")
    return host, int(port)


def address(text: str) -> str:
    split_address(text)
    return text


def optional_host(text: str) -> str:
    """A host name or IP address (no port), or "" for none."""
    if not text:
        return ""
    host = text.strip("[]")
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if not is_host_name(host):
        raise Invalid()
    return host


ADDRESS_FORM = "host:port with a port from 1 to 65535 (an IPv6 address in brackets: [::1]:1280)"


#: Hosts that listen on every address: no one can connect to them as written.
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def with_host(address: str, fallback: str) -> str:
    """``host:port`` as given, or with ``fallback`` as its host when that is a wildcard."""
    host, _, port = address.rpartition(":")
    return f"{fallback if host.strip('[]') in WILDCARD_HOSTS else host}:{port}"


def optional_address(text: str) -> str:
    return address(text) if text else ""


def optional_addresses(text: str) -> str:
    """``host:port`` addresses separated by commas (each checked), or "" for none: as given,
    without blanks around the commas."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip():
        return ""
    if any(not part for part in parts):
        raise Invalid("an address between commas is empty")
    for part in parts:
        split_address(part)
    return ",".join(parts)


def host_names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    bad = [name for name in names if not is_host_name(name)]
    if bad:
        raise Invalid(f"{bad[0]!r} is neither")
    return names


def networks(text: str) -> tuple[str, ...]:
    values = tuple(part.strip() for part in text.split(",") if part.strip())
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise Invalid(f"{value!r} is neither") from None
    return values


_MEMORY = re.compile(
    r"\d+(\.\d+)?\s*(b|bytes?|kb|mb|gb|tb|kib|mib|gib|tib|kilobytes?|megabytes?|gigabytes?|terabytes?|%)",
    re.IGNORECASE,
)


def memory(text: str) -> str:
    if not _MEMORY.fullmatch(text):
        raise Invalid()
    return text


def parse_origins(raw: str) -> tuple[str, ...]:
    """A comma-separated CORS allow-list, each origin normalised (lowercase, no trailing slash).

    An origin is ``scheme://host[:port]`` exactly as browsers send it; ``*`` allows any origin
    (answered ``Access-Control-Allow-Origin: *``, never with credentials). A bad one is a
    :class:`SettingError` naming ``TRELLIS_CORS_ORIGINS``.
    """
    out: list[str] = []
    for part in raw.split(","):
        origin = part.strip().rstrip("/").lower()
        if not origin:
            continue
        if origin != "*":
            scheme, sep, rest = origin.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or any(c in rest for c in "/?#@ "):
                raise SettingError(
                    f"TRELLIS_CORS_ORIGINS must be {ORIGINS_FORM}, not {raw!r} "
                    f"({part.strip()!r} is not an origin)"
                )
        if origin not in out:
            out.append(origin)
    return tuple(out)


ORIGINS_FORM = "comma-separated origins (scheme://host[:port]) or *"

DATABASE_URL_FORM = "a postgresql:// URL or libpq key=value pairs"
_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def database_url(text: str) -> str:
    """A PostgreSQL connection string as libpq takes it: ``postgresql://`` (or ``postgres://``)
    URL, or ``key=value`` pairs (empty: none); libpq parses it when the store opens. It may hold
    a password, so a refusal never repeats it: a :class:`SettingError` naming the variable, and
    the scheme when that is all that is wrong."""
    if not text:
        return ""
    scheme, sep, _ = text.partition("://")
    if sep:
        if scheme.lower() in ("postgresql", "postgres"):
            return text
        what = f"a {scheme}:// URL" if _URL_SCHEME.fullmatch(scheme) else "a URL of another scheme"
    elif "=" in text:
        return text
    else:
        what = "text of neither form (not shown: it may hold a password)"
    raise SettingError(f"TRELLIS_DATABASE_URL must be {DATABASE_URL_FORM}, not {what}")


#: The most serving processes ``TRELLIS_WORKERS`` takes.
WORKERS_MAX = 64


def workers(text: str) -> int:
    """A number of serving processes; 0 for none given (the default of the store: see
    :attr:`Settings.serving_workers`)."""
    return whole(1, WORKERS_MAX)(text) if text else 0


# -- every setting -------------------------------------------------------------------------------

#: The commands that read settings (``trellis <command>``), and those that open the database.
ALL = ("init", "serve", "restore")
#: ``trellis router enroll`` and ``trellis router run``.
ROUTER = ("router-enroll", "router-run")
#: Every command that reads settings.
COMMANDS = ALL + ROUTER
STORE = ("init", "serve")

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "TRELLIS_HOME", "home", ".trellis", "a directory path",
        "the data directory: `trellis.duckdb` (the database) and `pki/` (the CA, the server's key and certificate)",
        ALL, Path, shown_default="`./.trellis`",
    ),
    Setting("TRELLIS_BIND", "bind", "127.0.0.1:1280", ADDRESS_FORM, "the HTTPS listen address", parser=address),
    Setting(
        "TRELLIS_CTRL_BIND", "ctrl_bind", "127.0.0.1:6262", ADDRESS_FORM,
        "the control listener's address: edge routers connect here (mutual TLS, channel v2)",
        ("init", "serve"), parser=address,
    ),
    Setting(
        "TRELLIS_ADVERTISE", "advertise", "", ADDRESS_FORM,
        "the `host:port` clients use to reach the API (enrollment JWT `iss`, `apiBaseUrls`); unset: the "
        "bind address, with `localhost` for 0.0.0.0 or ::",
        parser=optional_address, shown_default="the bind address",
    ),
    Setting(
        "TRELLIS_SAN", "sans", "", "comma-separated DNS names or IP addresses",
        "extra names of the server certificate (when `init` makes the PKI)",
        ("init",), host_names, shown_default="none",
    ),
    Setting(
        "TRELLIS_ADMIN_PASSWORD", None, "", "5 to 100 characters",
        "the default admin's password (when `init` creates the admin; `serve` re-executes itself without it)",
        ("init",), shown_default="generated, printed once",
    ),
    Setting(
        "TRELLIS_ADMIN_PASSWORD_FILE", None, "", "a readable file holding 5 to 100 characters",
        "a file holding the admin password: better than the variable (one trailing line ending is ignored)",
        ("init",), shown_default="none",
    ),
    Setting(
        "TRELLIS_CERT_PROXIES", "cert_proxies", "", "comma-separated IP addresses or CIDR blocks",
        "TLS-terminating proxies whose `X-Client-CertPem` header is believed",
        parser=networks, shown_default="none",
    ),
    Setting(
        "TRELLIS_SESSION_TIMEOUT_MINUTES", "session_timeout", "30", whole_form(1, 525_600, " of minutes"),
        "the sliding API-session lifetime", parser=minutes,
    ),
    Setting(
        "TRELLIS_WORKERS", "workers", "", whole_form(1, WORKERS_MAX),
        "serving processes, each with the whole data set in memory",
        parser=workers, shown_default="1 with DuckDB; with `TRELLIS_DATABASE_URL`, the number of cores",
        detail="With DuckDB only 1: one process may open the database file. With PostgreSQL the "
        "workers share the database: one write order through the cluster's write token, each "
        "following the others' writes within milliseconds; one of them runs the control listener and "
        "the maintenance ticker (see docs/architecture.md, Several processes)",
    ),
    Setting(
        "TRELLIS_THREADS", "threads", "16", whole_form(1, 256), "threads running the app in the one worker",
        parser=whole(1, 256),
        detail="DuckDB allows one writer process; a writer holds its thread until its batch is durable, "
        "so more threads make larger batches: 16 took durable writes over HTTP from ~770/s to ~1,100/s "
        "at tier L against 8, reads unchanged. Connections are served by the worker's event loop, "
        "so a stalled client holds no thread",
    ),
    Setting(
        "TRELLIS_TIMEOUT_HANDSHAKE_SECONDS", "handshake_timeout", "10", seconds_form(),
        "time limit of a TLS handshake", parser=seconds(),
    ),
    Setting(
        "TRELLIS_TIMEOUT_HEADER_SECONDS", "header_timeout", "10", seconds_form(),
        "time limit for reading a request's head", parser=seconds(),
    ),
    Setting(
        "TRELLIS_TIMEOUT_BODY_SECONDS", "body_timeout", "30", seconds_form(),
        "time limit for reading a request's body", parser=seconds(),
    ),
    Setting(
        "TRELLIS_TIMEOUT_WRITE_SECONDS", "write_timeout", "30", seconds_form(),
        "time limit for writing an answer", parser=seconds(),
    ),
    Setting(
        "TRELLIS_TIMEOUT_KEEPALIVE_SECONDS", "keepalive_timeout", "5", seconds_form(zero=True),
        "idle keep-alive connections are closed after this (0: no keep-alive)", parser=seconds(zero=True),
    ),
    Setting(
        "TRELLIS_DATABASE_URL", "database_url", "", DATABASE_URL_FORM,
        "the PostgreSQL database holding the data instead of `trellis.duckdb` (the PKI stays in "
        "`TRELLIS_HOME`); `postgresql://user@host:5432/trellis`",
        ALL, database_url, shown_default="none: DuckDB in `TRELLIS_HOME`",
        detail="Several workers and servers may share a database (`TRELLIS_WORKERS`). A password "
        "in it is never logged; libpq's `PGPASSWORD` or password file keep it out of the URL. Back up "
        "with `pg_dump` (see Snapshots and restore)",
    ),
    Setting(
        "TRELLIS_DB_MEMORY_LIMIT", "db_memory_limit", "1GB", "a size such as 512MB, 1GB, 2GiB or 50%",
        "DuckDB's memory limit", STORE, memory,
    ),
    Setting(
        "TRELLIS_DB_JOURNAL", "db_journal", "on", "on or off",
        "`on`: a write is durable (and answered) once its batch is appended to the journal and "
        "`fdatasync`ed; `off`: once its batch's own DuckDB transaction commits",
        STORE, switch,
        detail="With `on`, a flusher puts the journaled batches into DuckDB, many to a transaction "
        "(see Reliability)",
    ),
    Setting(
        "TRELLIS_DB_WRITER", "db_writer", "process", "process or thread",
        "where the database's statements run once it is loaded: `process`, a writer process of the "
        "controller's own, or `thread`, the committer thread of the serving process",
        STORE, choice("process", "thread"),
        detail="The writer process holds the DuckDB file; each batch is one message to it, so the "
        "request threads never hold up a commit",
    ),
    Setting(
        "TRELLIS_CHANGE_LOG_RETAIN", "change_log_retain", "100000", whole_form(1),
        "change-log entries kept after each checkpoint (what a replica may still catch up from)",
        STORE, whole(1), detail="See Reliability",
    ),
    Setting(
        "TRELLIS_ACCESS_CHANGES_RETAIN_DAYS", "access_changes_retain_days", "7", whole_form(1, 3650),
        "days the access-change stream keeps each batch's access changes (how far back "
        "`/analysis/v1/access-changes` can be resumed)", parser=whole(1, 3650),
        detail="See docs/analysis.md §15",
    ),
    Setting(
        "TRELLIS_ACCESS_CHANGES_STREAMS", "access_changes_streams", "4", whole_form(1, 256),
        "Server-Sent Events requests of `/analysis/v1/access-changes` waiting at once (more: 429); each "
        "holds a request thread while it waits, at most 15 s", parser=whole(1, 256),
    ),
    Setting(
        "TRELLIS_RATE_AUTH_PER_MINUTE", "rate_auth_per_minute", "600", whole_form(0),
        "authentication budget per client address (0: unlimited)", parser=whole(0),
        detail="It covers `/authenticate`, `/authenticate/mfa`, enrollment, and every operation that "
        "checks an MFA code or a current password (MFA verification and removal, recovery codes, "
        "TOTP tokens, `PUT`/`PATCH /current-identity/authenticators/{id}`). Processes sharing a "
        "PostgreSQL database share the budget (docs/architecture.md §5)",
    ),
    Setting(
        "TRELLIS_RATE_AUTH_BURST", "rate_auth_burst", "600", whole_form(1),
        "authentication requests a client address may send at once", parser=whole(1),
    ),
    Setting(
        "TRELLIS_RATE_WRITE_PER_MINUTE", "rate_write_per_minute", "30000", whole_form(0),
        "write (POST/PUT/PATCH/DELETE) budget per API session, else per address (0: unlimited)",
        parser=whole(0), detail="Processes sharing a PostgreSQL database share the budget",
    ),
    Setting(
        "TRELLIS_RATE_WRITE_BURST", "rate_write_burst", "5000", whole_form(1),
        "writes a client may send at once", parser=whole(1),
    ),
    Setting(
        "TRELLIS_MFA_FREE_FAILURES", "mfa_free_failures", "10", whole_form(1),
        "wrong MFA codes an identity may send before each further guess must wait", parser=whole(1),
        detail="All the operations that take a code count together; a right code clears the count",
    ),
    Setting(
        "TRELLIS_MFA_BACKOFF_SECONDS", "mfa_backoff", "30", seconds_form(),
        "the wait after the last free wrong MFA code, doubling with each further wrong one",
        parser=seconds(),
        detail="Guesses are then taken one at a time; a refused one is 429 with `Retry-After`",
    ),
    Setting(
        "TRELLIS_MFA_BACKOFF_MAX_SECONDS", "mfa_backoff_max", "3600", seconds_form(),
        "the longest such wait (at least `TRELLIS_MFA_BACKOFF_SECONDS`)", parser=seconds(),
        detail="At 3600: past the free codes, about 24 guesses a day",
    ),
    Setting(
        "TRELLIS_REQUEST_TIMEOUT_SECONDS", "request_timeout", "30", seconds_form(zero=True),
        "a request's time budget in the app; lists and filters past it answer 503 `TIMEOUT` (0: none)",
        parser=seconds(zero=True),
    ),
    Setting(
        "TRELLIS_PURGE_INTERVAL_SECONDS", "purge_interval", "60", seconds_form(),
        "how often `serve` deletes expired API sessions with their sessions and certificates",
        parser=seconds(),
    ),
    Setting(
        "TRELLIS_POSTURE_INTERVAL_SECONDS", "posture_interval", "5", seconds_form(),
        "how often `serve` ends sessions that no longer pass posture (OpenZiti: 5)", parser=seconds(),
        detail="An MFA check's timeout lapses with time",
    ),
    Setting(
        "TRELLIS_ROUTER", "router", "on", "on or off",
        "`on`: `init` creates and enrolls an edge router in `TRELLIS_HOME/router` and `serve` runs it "
        "beside the controller; `off`: neither",
        ("init", "serve"), parser=switch,
        detail="The embedded router is named `trellis-router` (`#public`, tunneler enabled); the first "
        "`init` also creates the policies `ziti edge quickstart` makes, `all-endpoints-public-routers` and "
        "`all-routers-all-services`",
    ),
    Setting(
        "TRELLIS_ROUTER_HOME", "router_home", ".trellis-router", "a directory path",
        "a standalone router's directory: its key, certificates and `router.json`",
        ROUTER, Path, shown_default="`./.trellis-router`",
    ),
    Setting(
        "TRELLIS_ROUTER_EDGE_BIND", "router_edge_bind", "", ADDRESS_FORM,
        "where a router being enrolled will listen for SDKs; kept in its `router.json`",
        ("init", "router-enroll"), parser=optional_address, shown_default="127.0.0.1 and a free port",
    ),
    Setting(
        "TRELLIS_ROUTER_LINK_BIND", "router_link_bind", "", ADDRESS_FORM,
        "where a router being enrolled will listen for links from other routers; kept in its `router.json`",
        ("init", "router-enroll"), parser=optional_address, shown_default="127.0.0.1 and a free port",
    ),
    Setting(
        "TRELLIS_ROUTER_ADVERTISE", "router_advertise", "", "a host name or IP address",
        "the host SDKs are told to reach a router being enrolled at (`tls://host:port`)",
        ("init", "router-enroll"), parser=optional_host, shown_default="the edge bind host",
    ),
    Setting(
        "TRELLIS_ROUTER_CTRL", "router_ctrl", "", f"{ADDRESS_FORM}; several separated by commas",
        "the controllers' control addresses (the router keeps a connection to each): `enroll` keeps "
        "them in `router.json`, `run` uses them instead of the kept ones when set",
        ROUTER, parser=optional_addresses, shown_default="the JWT's `ctrls`",
    ),
    Setting(
        "TRELLIS_ROUTER_OFFLINE_GRACE", "router_offline_grace", "1800", seconds_form(zero=True),
        "how long a router that reaches no controller decides alone (0: never): it lets in the API "
        "sessions it holds and serves the Dials it was granted before",
        ("serve", "router-run"), parser=seconds(zero=True),
        detail="Established connections go on regardless; past it, new SDK channels and Dials are "
        "refused until a controller is back ([dataplane.md §9](dataplane.md#9-without-controllers)). "
        "`serve`'s embedded router takes it too. 1800: OpenZiti's default API-session and "
        "access-token lifetime",
    ),
    Setting(
        "TRELLIS_JWKS_ALLOW_LOOPBACK", "jwks_allow_loopback", "off", "on or off",
        "`on`: external JWT signers' `jwksEndpoint` may be on a loopback address (an identity "
        "provider on the controller's own host); `off`: refused when set (400) and when fetched",
        parser=switch,
        detail="Loopback: 127.0.0.0/8, ::1, localhost. Link-local and cloud-metadata, unspecified, "
        "multicast and reserved addresses are always refused; private networks are always allowed",
    ),
    Setting(
        "TRELLIS_LOG_LEVEL", "log_level", "info", "one of debug, info, warning, error, critical",
        "the lowest level of the log lines written (access lines are `info`)", ALL,
        parser=choice("debug", "info", "warning", "error", "critical"),
    ),
    Setting(
        "TRELLIS_LOG_FORMAT", "log_format", "text", "one of text, json",
        "`text`: one `key=value` line a record; `json`: one JSON object a line, with the same keys",
        ALL, parser=choice("text", "json"),
    ),
    Setting(
        "TRELLIS_CORS_ORIGINS", "cors_origins", "", ORIGINS_FORM,
        "origins (`https://console.example:8443`) answered with CORS headers; none: CORS off",
        parser=parse_origins, shown_default="none",
    ),
)  # fmt: skip

BY_ENV: dict[str, Setting] = {s.env: s for s in SETTINGS}


#: Each variable's default, parsed: the :class:`Settings` fields' defaults (every value immutable).
DEFAULTS: dict[str, Any] = {s.env: s.parse(None) for s in SETTINGS}


@dataclass(frozen=True)
class Settings:
    """What the controller runs with: the fields :data:`SETTINGS` fill (see each one's help),
    plus a few that no variable sets."""

    home: Path = DEFAULTS["TRELLIS_HOME"]
    bind: str = DEFAULTS["TRELLIS_BIND"]
    #: Where edge routers connect (controller.control).
    ctrl_bind: str = DEFAULTS["TRELLIS_CTRL_BIND"]
    advertise: str = DEFAULTS["TRELLIS_ADVERTISE"]
    sans: tuple[str, ...] = DEFAULTS["TRELLIS_SAN"]
    session_timeout: timedelta = DEFAULTS["TRELLIS_SESSION_TIMEOUT_MINUTES"]
    enrollment_duration: timedelta = timedelta(minutes=180)
    max_body_bytes: int = 1024 * 1024
    #: A PostgreSQL connection string (storage.postgres); empty: DuckDB in ``home``. Not in the
    #: repr: it may hold a password.
    database_url: str = field(default=DEFAULTS["TRELLIS_DATABASE_URL"], repr=False)
    db_memory_limit: str = DEFAULTS["TRELLIS_DB_MEMORY_LIMIT"]
    #: See storage.duckdb.writer.
    db_writer: str = DEFAULTS["TRELLIS_DB_WRITER"]
    #: See storage.duckdb.journal.
    db_journal: bool = DEFAULTS["TRELLIS_DB_JOURNAL"]
    change_log_retain: int = DEFAULTS["TRELLIS_CHANGE_LOG_RETAIN"]
    #: The access-change stream (engine.analysis.stream): its retention, its waiting requests.
    access_changes_retain_days: int = DEFAULTS["TRELLIS_ACCESS_CHANGES_RETAIN_DAYS"]
    access_changes_streams: int = DEFAULTS["TRELLIS_ACCESS_CHANGES_STREAMS"]
    threads: int = DEFAULTS["TRELLIS_THREADS"]
    #: ``TRELLIS_WORKERS`` as given, 0 when it is not (see :attr:`serving_workers`).
    workers: int = DEFAULTS["TRELLIS_WORKERS"]
    cert_proxies: tuple[str, ...] = DEFAULTS["TRELLIS_CERT_PROXIES"]
    #: The serving worker's time limits, in seconds (see controller.worker).
    handshake_timeout: float = DEFAULTS["TRELLIS_TIMEOUT_HANDSHAKE_SECONDS"]
    header_timeout: float = DEFAULTS["TRELLIS_TIMEOUT_HEADER_SECONDS"]
    body_timeout: float = DEFAULTS["TRELLIS_TIMEOUT_BODY_SECONDS"]
    write_timeout: float = DEFAULTS["TRELLIS_TIMEOUT_WRITE_SECONDS"]
    keepalive_timeout: float = DEFAULTS["TRELLIS_TIMEOUT_KEEPALIVE_SECONDS"]
    #: Per-client request budgets (token buckets; 0 requests per minute turns one off).
    rate_auth_per_minute: int = DEFAULTS["TRELLIS_RATE_AUTH_PER_MINUTE"]
    rate_auth_burst: int = DEFAULTS["TRELLIS_RATE_AUTH_BURST"]
    rate_write_per_minute: int = DEFAULTS["TRELLIS_RATE_WRITE_PER_MINUTE"]
    rate_write_burst: int = DEFAULTS["TRELLIS_RATE_WRITE_BURST"]
    #: MFA code guesses per identity: this many wrong codes free, then one at a time, the wait
    #: doubling from ``mfa_backoff`` to ``mfa_backoff_max`` seconds; a right code clears it.
    mfa_free_failures: int = DEFAULTS["TRELLIS_MFA_FREE_FAILURES"]
    mfa_backoff: float = DEFAULTS["TRELLIS_MFA_BACKOFF_SECONDS"]
    mfa_backoff_max: float = DEFAULTS["TRELLIS_MFA_BACKOFF_MAX_SECONDS"]
    request_timeout: float = DEFAULTS["TRELLIS_REQUEST_TIMEOUT_SECONDS"]
    purge_interval: float = DEFAULTS["TRELLIS_PURGE_INTERVAL_SECONDS"]
    posture_interval: float = DEFAULTS["TRELLIS_POSTURE_INTERVAL_SECONDS"]
    cors_origins: tuple[str, ...] = DEFAULTS["TRELLIS_CORS_ORIGINS"]
    jwks_allow_loopback: bool = DEFAULTS["TRELLIS_JWKS_ALLOW_LOOPBACK"]
    #: The embedded edge router, and a router's enrollment (see router.identity).
    router: bool = DEFAULTS["TRELLIS_ROUTER"]
    router_home: Path = DEFAULTS["TRELLIS_ROUTER_HOME"]
    router_edge_bind: str = DEFAULTS["TRELLIS_ROUTER_EDGE_BIND"]
    router_link_bind: str = DEFAULTS["TRELLIS_ROUTER_LINK_BIND"]
    router_advertise: str = DEFAULTS["TRELLIS_ROUTER_ADVERTISE"]
    router_ctrl: str = DEFAULTS["TRELLIS_ROUTER_CTRL"]
    router_offline_grace: float = DEFAULTS["TRELLIS_ROUTER_OFFLINE_GRACE"]
    #: The log's lowest level and line format (see controller.logs).
    log_level: str = DEFAULTS["TRELLIS_LOG_LEVEL"]
    log_format: str = DEFAULTS["TRELLIS_LOG_FORMAT"]
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def serving_workers(self) -> int:
        """How many processes ``trellis serve`` runs: ``TRELLIS_WORKERS``, else 1 on DuckDB and
        the number of cores on PostgreSQL."""
        if self.workers:
            return self.workers
        return max(1, os.cpu_count() or 1) if self.database_url else 1

    @property
    def db_path(self) -> Path:
        return self.home / "trellis.duckdb"

    @property
    def pki_dir(self) -> Path:
        return self.home / "pki"

    @property
    def embedded_router_dir(self) -> Path:
        """The embedded edge router's directory (``TRELLIS_ROUTER``)."""
        return self.home / "router"

    @property
    def advertised_address(self) -> str:
        return self.advertise or with_host(self.bind, "localhost")

    @property
    def advertised_ctrl_address(self) -> str:
        """Where routers reach the control listener: ``TRELLIS_CTRL_BIND``, with the advertised
        API host in place of a wildcard host."""
        return with_host(self.ctrl_bind, self.advertised_address.rpartition(":")[0])

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, command: str | None = None) -> Settings:
        """The settings from ``environ`` (default ``os.environ``): those ``command`` reads, the
        rest their defaults (every one for None); :class:`SettingError` for the first that is
        not of its form."""
        env = os.environ if environ is None else environ
        values = {s.field: s.parse(env.get(s.env)) for s in read_by(command) if s.field is not None}
        settings = cls(**values)
        if settings.workers > 1 and not settings.database_url:
            raise SettingError(
                f"TRELLIS_WORKERS must be 1 with DuckDB (one process may open its file), not "
                f"{env.get('TRELLIS_WORKERS')!r}: set TRELLIS_DATABASE_URL to serve with more"
            )
        if settings.mfa_backoff_max < settings.mfa_backoff:
            raise SettingError(
                f"TRELLIS_MFA_BACKOFF_MAX_SECONDS must be at least TRELLIS_MFA_BACKOFF_SECONDS "
                f"({settings.mfa_backoff:g}), not {env.get('TRELLIS_MFA_BACKOFF_MAX_SECONDS')!r}"
            )
        return settings


# -- help and the settings table of docs/operations.md ------------------------------------------


def read_by(command: str | None) -> tuple[Setting, ...]:
    """The settings ``command`` reads (all of them for None)."""
    return tuple(s for s in SETTINGS if command is None or command in s.commands)


def _plain(text: str) -> str:
    return text.replace("`", "")


def describe(command: str | None = None, width: int = 79) -> str:
    """The settings ``command`` reads (all for None), for ``--help``: each as ``NAME (default
    ...)`` and, indented, what it does and the form it takes."""
    lines: list[str] = []
    for s in read_by(command):
        default = s.default_text or "none"
        lines.append(f"  {s.env} (default: {_plain(default)})")
        text = f"{_plain(s.help)}. Form: {s.form}."
        lines += textwrap.wrap(text, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def listing() -> str:
    """Every setting and its default, one a line (the top-level ``--help``)."""
    width = max(len(s.env) for s in SETTINGS) + 2
    return "\n".join(f"  {s.env:<{width}}{_plain(s.default_text) or 'none'}" for s in SETTINGS)


def markdown() -> str:
    """The settings table of docs/operations.md §2."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for s in SETTINGS:
        default = s.shown_default or (f"`{s.default}`" if s.default else "")
        if default == "none":
            default = ""
        meaning = s.help + (f". {s.detail}" if s.detail else "")
        rows.append(f"| `{s.env}` | {cell(default)} | {cell(meaning)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m controller.settings", description="Trellis's settings")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="the settings table of docs/operations.md (default: as in --help)",
    )
    args = parser.parse_args(argv)
    print(markdown() if args.markdown else describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
