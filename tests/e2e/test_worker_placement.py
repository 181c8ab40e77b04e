"""Where the worker runs a request (controller/worker.py): on its event loop when the app's
``runs_on_loop`` says so, else on a pool thread; a request run on the loop is answered only once
the writes it deferred are durable (503 ``COMMIT_FAILED`` if one is refused), and while it waits
the loop serves everyone else."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.server import HOST, ROOT, end_process, free_port

pytestmark = [pytest.mark.e2e]

PLACEMENT_SERVER = r"""
import json, sys, threading
from gunicorn.app.base import BaseApplication

port = sys.argv[1]
held = []  # deferred writes, released by /pool/release


class Pending:
    def __init__(self, error=None):
        self.error = None
        self._fail = error
        self._callbacks = []
        self._done = False
        self._lock = threading.Lock()

    def when_done(self, callback):
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback()

    def finish(self):
        with self._lock:
            self.error = self._fail
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


def app(environ, start_response):
    path = environ["PATH_INFO"]
    deferred = environ.get("trellis.deferred")
    if path == "/loop/defer":
        pending = Pending()
        held.append(pending)
        deferred.append(pending)
    elif path == "/loop/refused":
        pending = Pending(error=RuntimeError("the disk is gone"))
        deferred.append(pending)
        pending.finish()
    elif path == "/pool/release":
        while held:
            held.pop().finish()
    doc = {"thread": threading.current_thread().name, "deferrable": deferred is not None}
    data = json.dumps(doc).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


app.runs_on_loop = lambda method, path, query: method == "GET" and path.startswith("/loop/")


class App(BaseApplication):
    def load_config(self):
        options = {"bind": f"127.0.0.1:{port}", "workers": 1, "threads": 2,
                   "worker_class": "controller.worker.TrellisWorker", "accesslog": "-",
                   "control_socket_disable": True, "keepalive": 30}
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self):
        return app


App().run()
"""


def test_requests_run_where_the_app_places_them_and_deferred_writes_hold_the_answer(tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", PLACEMENT_SERVER, str(port)], cwd=ROOT, stdout=log, stderr=log
    )
    try:

        def call(path: str, method: str = "GET") -> tuple[int, dict[str, Any]]:
            conn = http.client.HTTPConnection(HOST, port, timeout=10)
            try:
                conn.request(method, path)
                got = conn.getresponse()
                return got.status, json.loads(got.read())
            finally:
                conn.close()

        deadline = time.monotonic() + 20
        while True:
            try:
                status, pooled = call("/pool/x")
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()
                assert time.monotonic() < deadline, "the stand-in server did not start"
                time.sleep(0.2)
        assert status == 200
        assert pooled == {"thread": pooled["thread"], "deferrable": False}
        assert pooled["thread"].startswith("trellis-app")
        assert call("/loop/x") == (200, {"thread": "MainThread", "deferrable": True})
        assert call("/loop/x", "POST")[1]["thread"].startswith("trellis-app")  # not the app's choice

        waiting = http.client.HTTPConnection(HOST, port, timeout=0.5)
        waiting.request("GET", "/loop/defer")
        with pytest.raises(TimeoutError):  # not answered while its write is pending...
            waiting.getresponse()
        assert call("/loop/x")[0] == 200  # ... and the loop serves others meanwhile
        assert call("/pool/release")[0] == 200
        assert waiting.sock is not None
        waiting.sock.settimeout(10)
        answer = waiting.getresponse()  # once durable, the app's own answer
        assert answer.status == 200
        assert json.loads(answer.read())["thread"] == "MainThread"
        waiting.close()

        refused = http.client.HTTPConnection(HOST, port, timeout=10)
        refused.request("GET", "/loop/refused")
        got = refused.getresponse()
        body = json.loads(got.read())
        refused.close()
        assert got.status == 503
        assert body["error"]["code"] == "COMMIT_FAILED"
        assert got.getheader("connection") == "close"
    finally:
        end_process(proc, signal.SIGTERM, 15)
        log.close()
    served = (tmp_path / "serve.log").read_text()
    assert '"GET /loop/refused HTTP/1.1" 503' in served  # the access log has what was sent
    assert '"GET /loop/defer HTTP/1.1" 200' in served
