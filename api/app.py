"""The composition root: ``create_app(settings)`` builds the store, managers and Falcon app."""

from __future__ import annotations

import logging

import falcon
import orjson
from falcon import media

from api import __version__, authentication, errors, info
from api.client import register_all as register_client
from api.controller import Controller
from api.info import ZITI_COMPAT_VERSION
from api.json_schemas import JsonSchemaChecker
from api.management import register_all as register_management
from api.middleware import RequestMiddleware
from api.routing import Routes
from api.settings import Settings
from api.system import ShortIds, SystemClock
from engine.entities import all as _all_kinds  # noqa: F401  (registers every entity kind)
from engine.managers._base import Env
from engine.managers.access import AccessManager
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.authentication import AuthenticationManager
from engine.managers.bootstrap import ensure_builtins
from engine.ports import Clock, Store
from pki import CertificateAuthority, ScryptPasswordHasher

log = logging.getLogger("trellis")


def open_store(settings: Settings) -> Store:
    from storage.duckdb import DuckDBStore

    return DuckDBStore(settings.db_path, memory_limit=settings.db_memory_limit)


def load_pki(settings: Settings) -> CertificateAuthority | None:
    from pki.authority import PkiPaths

    paths = PkiPaths.in_directory(settings.pki_dir)
    if not paths.exists():
        return None
    return CertificateAuthority.load(paths)


def build_controller(
    settings: Settings, store: Store | None = None, clock: Clock | None = None
) -> Controller:
    store = store if store is not None else open_store(settings)
    ids = ShortIds()
    env = Env(
        store=store,
        clock=clock or SystemClock(),
        ids=ids,
        hasher=ScryptPasswordHasher(),
        schemas=JsonSchemaChecker(),
    )
    ensure_builtins(env)
    instance_id = store.get_setting("instance_id")
    if instance_id is None:
        instance_id = ids.new_id()
        store.put_setting("instance_id", instance_id)
    sessions = ApiSessionManager(env, settings.session_timeout)
    access = AccessManager(store)  # the policy graph, resolved from the store in bulk
    env.listeners.append(access.on_commit)
    return Controller(
        settings=settings,
        env=env,
        sessions=sessions,
        auth=AuthenticationManager(env, sessions),
        access=access,
        instance_id=instance_id,
        version=ZITI_COMPAT_VERSION,
        version_trellis=__version__,
        pki=load_pki(settings),
    )


class TrellisApp(falcon.App[falcon.Request, falcon.Response]):
    """The Falcon app with the controller behind it at ``app.ctrl``."""

    ctrl: Controller


def create_app(
    settings: Settings | None = None, *, store: Store | None = None, clock: Clock | None = None
) -> TrellisApp:
    """The WSGI app serving both APIs (``store`` and ``clock`` may be supplied, e.g. by tests)."""
    settings = settings or Settings.from_env()
    ctrl = build_controller(settings, store, clock)
    app = TrellisApp(middleware=[RequestMiddleware(ctrl)], cors_enable=False)
    app.ctrl = ctrl
    json = media.JSONHandler(dumps=orjson.dumps, loads=orjson.loads)
    app.req_options.media_handlers[falcon.MEDIA_JSON] = json
    app.resp_options.media_handlers[falcon.MEDIA_JSON] = json
    app.req_options.strip_url_path_trailing_slash = True
    app.req_options.keep_blank_qs_values = False
    errors.install(app)
    routes = Routes(app, ctrl)
    info.register(routes)
    authentication.register(routes)
    register_management(routes)
    register_client(routes)
    return app
