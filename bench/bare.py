"""The yardstick of ``python -m bench http``: a bare Falcon app answering ``{"hello": "world"}``.

It is served exactly as ``trellis serve`` serves the controller (:class:`controller.serve.TrellisServer`:
one gunicorn worker, ``TRELLIS_THREADS`` threads, the same TLS certificate, key and context, the
same access log and time limits), with only the app swapped, and optionally the worker class:

- ``gthread``: gunicorn's threaded worker with 8 threads (the serving model the issue's
  yardstick was measured with);
- ``trellis``: the controller's own worker (:mod:`controller.worker`), as ``trellis serve`` runs.

Run (in a home made by ``trellis init``, for its PKI)::

    TRELLIS_HOME=... TRELLIS_BIND=127.0.0.1:8443 python -m bench.bare --worker gthread
"""

from __future__ import annotations

import argparse
from typing import Any

import falcon

#: gunicorn settings each worker option overrides in ``trellis serve``'s configuration.
WORKERS: dict[str, dict[str, Any]] = {
    "gthread": {"worker_class": "gthread", "threads": 8},
    "trellis": {},
}


class Hello:
    """``GET /``: the smallest JSON answer Falcon gives."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"hello": "world"}


def create_app() -> falcon.App[falcon.Request, falcon.Response]:
    app: falcon.App[falcon.Request, falcon.Response] = falcon.App()
    app.add_route("/", Hello())
    return app


def serve(worker: str) -> None:
    """Serve :func:`create_app` with ``trellis serve``'s settings and ``worker``'s overrides."""
    from controller.serve import TrellisServer
    from controller.settings import Settings

    overrides = WORKERS[worker]

    class BareServer(TrellisServer):
        def load_config(self) -> None:
            super().load_config()
            for key, value in overrides.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            return create_app()

    BareServer(Settings.from_env()).run()


if __name__ == "__main__":
    cli = argparse.ArgumentParser(prog="python -m bench.bare", description=__doc__)
    cli.add_argument("--worker", choices=sorted(WORKERS), default="gthread")
    serve(cli.parse_args().worker)
