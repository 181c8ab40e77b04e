"""The controller's state without its HTTP side: the store, the ports and the managers of
``settings`` (:func:`build_controller`), and this controller's id among the network's
(:func:`controller_identity`).

``trellis init`` needs no more than this, so it does not import the Falcon app and its resources
(about a second of a start on these machines); :mod:`.app` builds the app around it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from api import ZITI_COMPAT_VERSION, __version__
from api.controller import Controller
from api.json_schemas import JsonSchemaChecker
from controller.settings import SettingError, Settings
from controller.system import ShortIds, SystemClock
from engine.entities import all as _all_kinds  # noqa: F401  (registers every entity kind)
from engine.managers._base import Env
from engine.managers.enrollment import EnrollmentSettings
from engine.managers.registry import build_managers
from engine.ports import (
    Backoff,
    Clock,
    ExternalJwtVerifier,
    IdGenerator,
    PasswordHasher,
    Store,
    TotpService,
)
from pki import Argon2idPasswordHasher, CertificateAuthority, JwksVerifier, JwtSigner, PkiPaths, PyotpTotp


def open_store(settings: Settings) -> Store:
    """The store of ``settings``: the PostgreSQL database of ``TRELLIS_DATABASE_URL`` when set,
    else the DuckDB file in ``TRELLIS_HOME``. A PostgreSQL database that cannot be opened stops
    the command in one line (:class:`SettingError`), its password never shown."""
    if settings.database_url:
        from storage.postgres import PostgresStore

        with _database_url_refused():
            return PostgresStore(settings.database_url, change_log_retain=settings.change_log_retain)
    from storage.duckdb import DuckDBStore

    return DuckDBStore(
        settings.db_path,
        memory_limit=settings.db_memory_limit,
        change_log_retain=settings.change_log_retain,
        writer=settings.db_writer,
        journal=settings.db_journal,
    )


def check_database(settings: Settings) -> str:
    """Where ``settings`` keep the data, checked without loading it (what ``trellis serve`` does
    before its worker starts): the PostgreSQL database of ``TRELLIS_DATABASE_URL`` must be
    reachable and usable, else :class:`SettingError`; its description, password masked (the
    DuckDB file's path when there is none)."""
    if not settings.database_url:
        return str(settings.db_path)
    from storage.postgres import probe

    with _database_url_refused():
        return probe(settings.database_url)


@contextmanager
def _database_url_refused() -> Iterator[None]:
    """The PostgreSQL store's refusals as one-line :class:`SettingError`s (never the password)."""
    from storage.postgres import DatabaseUrlError, StoreOpenError

    try:
        yield
    except DatabaseUrlError as ex:
        raise SettingError(f"TRELLIS_DATABASE_URL: {ex}") from None
    except StoreOpenError as ex:
        raise SettingError(f"TRELLIS_DATABASE_URL: {' '.join(str(ex).split())}") from None


def load_pki(settings: Settings) -> CertificateAuthority:
    paths = PkiPaths.in_directory(settings.pki_dir)
    if not paths.exists():
        raise SystemExit(f"no PKI in {settings.pki_dir}: run `trellis init` first")
    return CertificateAuthority.load(paths)


def enrollment_settings(settings: Settings) -> EnrollmentSettings:
    return EnrollmentSettings(
        issuer=f"https://{settings.advertised_address}",
        # Where a router enrolled with it is to connect (OpenZiti's ``tls:host:port`` form).
        ctrls=(f"tls:{settings.advertised_ctrl_address}",),
        identity_duration=settings.enrollment_duration,
        router_duration=settings.enrollment_duration,
    )


def build_controller(
    settings: Settings,
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    ids: IdGenerator | None = None,
    hasher: PasswordHasher | None = None,
    ca: CertificateAuthority | None = None,
    totp: TotpService | None = None,
    jwt_verifier: ExternalJwtVerifier | None = None,
    joining: bool = False,
) -> Controller:
    """The controller's state: ports (given or built from ``settings``) and one set of managers.
    ``joining``: ``trellis init`` issued this home's server certificate (see
    :func:`controller_identity`)."""
    authority = ca if ca is not None else load_pki(settings)
    store = store if store is not None else open_store(settings)
    ids = ids if ids is not None else ShortIds()
    env = Env(
        store=store,
        clock=clock if clock is not None else SystemClock(),
        ids=ids,
        hasher=hasher if hasher is not None else Argon2idPasswordHasher(),
        schemas=JsonSchemaChecker(),
        ca=authority,
        tokens=JwtSigner.for_authority(authority),
        totp=totp if totp is not None else PyotpTotp(),
        jwt_verifier=(
            jwt_verifier
            if jwt_verifier is not None
            else JwksVerifier(allow_loopback=settings.jwks_allow_loopback)
        ),
        # shared with the store's other processes where it has any (PostgreSQL)
        attempts=store.attempts_ledger(),
        activity=store.activity_board(max(settings.session_timeout * 2, timedelta(days=1))),
        fleet_board=store.fleet_board(),
        posture_board=store.posture_board(),
    )
    managers = build_managers(
        env,
        enrollment_settings(settings),
        session_timeout=settings.session_timeout,
        code_backoff=Backoff(settings.mfa_free_failures, settings.mfa_backoff, settings.mfa_backoff_max),
    )
    # several workers may start at once on a new shared database: the first one's id for all
    existing = store.get_setting("instance_id")
    instance_id = existing or store.setdefault_setting("instance_id", ids.new_id())
    return Controller(
        settings=settings,
        managers=managers,
        pki=authority,
        instance_id=instance_id,
        version=ZITI_COMPAT_VERSION,
        version_trellis=__version__,
        controller_id=controller_identity(
            settings.home, instance_id, ids, joining=joining and bool(existing)
        ),
    )


#: The file of a home that holds its controller's id among the network's (``/controllers``).
CONTROLLER_ID_FILE = "controller.id"


def controller_identity(home: Path, instance_id: str, ids: IdGenerator, *, joining: bool) -> str:
    """This controller's id: the one its home keeps; else, kept from now on, a new one for a
    controller joining a network that has one already (``trellis init`` of a home whose server
    certificate it issues, on a shared database that has an ``instance_id``), and otherwise the
    store's ``instance_id`` (the first controller, and every home made before homes kept it)."""
    path = home / CONTROLLER_ID_FILE
    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        kept = ""
    except OSError as ex:
        raise SettingError(f"{path} cannot be read: {ex.strerror}") from None
    if kept:
        return kept
    chosen = ids.new_id() if joining else instance_id
    if home.is_dir():
        partial = path.with_name(f".{CONTROLLER_ID_FILE}.{os.getpid()}")
        partial.write_text(chosen + "\n", encoding="utf-8")
        os.replace(partial, path)  # several workers at once write the same id: any one wins
    return chosen
