"""Dial a service with the real OpenZiti SDK, send bytes, and check they come back; run by the SDK
venv's python.

Usage: ``dial_driver.py <identity.json> <service> <bytes> [<dials>] [--paced]``. With
``--paced`` it prints ``READY`` before each dial after the first and waits for a line on stdin. Loads the identity; for
each dial connects a Ziti socket to the service (``_ziti_connect``: ``ZitiContext.connect`` is
broken in this wrapper), sends ``bytes`` pseudo-random bytes, waits for them to come back, half-closes (FIN), reads to
EOF (the binder's FIN) and
prints ``ECHO <sent> <received> <same>`` (``same`` is 1 when the bytes came back unchanged), or
``DIAL_FAILED <rc> <error>`` when the connect fails. Exit 0 when every echo matched, 5 otherwise,
3 when the identity does not load. Ends with ``os._exit``.

Before the SDK loads the identity, the driver asks the controller (the client API, with the
identity's certificate) which services it may dial, and when ``<service>`` is not one prints
``DIAL_REFUSED <service>: ...`` and exits 5 at once: the C SDK 0.29.3 waits without end in
``load`` for an identity that has no service at all (README tour, step 6). When the controller
cannot be asked, the SDK goes on and says what it finds.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import ssl
import sys
import tempfile
import threading
import urllib.parse

import openziti  # type: ignore[import-not-found]  # only installed in .venv-zsdk

zitilib = openziti.zitilib

#: How long a dial waits for its echo before it half-closes anyway.
ECHO_WAIT_SECONDS = 20.0


def payload(size: int) -> bytes:
    out = bytearray()
    block = b"trellis"
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


def dial_once(context: object, service: str, size: int) -> bool:
    fd = zitilib.ziti_socket(socket.SOCK_STREAM)
    rc = zitilib._ziti_connect(fd, context._ctx, service.encode(), None)  # type: ignore[attr-defined]
    if rc != 0:
        code = zitilib._ziti_lasterr()
        print("DIAL_FAILED", rc, code, zitilib.errorstr(code) if code else "", flush=True)
        return False
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fd)
    data = payload(size)
    received = bytearray()
    echoed = threading.Event()

    def reader() -> None:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return
            received.extend(chunk)
            if len(received) >= size:
                echoed.set()

    thread = threading.Thread(target=reader)
    thread.start()
    sock.sendall(data)
    # Half-close only once the echo is back: this wrapper's bridge on the binder's side closes
    # the whole connection when a FIN arrives while its application still writes (queued writes
    # are dropped), which a FIN sent right behind the data provokes.
    echoed.wait(ECHO_WAIT_SECONDS)
    sock.shutdown(socket.SHUT_WR)
    thread.join()
    sock.close()
    same = bytes(received) == data
    print("ECHO", len(data), len(received), int(same), flush=True)
    return same


def dialable(identity_file: str, timeout: float = 15.0) -> list[str] | None:
    """The names of the services the controller says this identity may dial, or None when it
    cannot be asked (what the SDK would do at load: a certificate login, then the service list;
    the API session is logged out after)."""
    try:
        with open(identity_file, encoding="utf-8") as f:
            identity = json.load(f)
        url = urllib.parse.urlsplit(identity["ztAPI"])
        pems = {k: v.removeprefix("pem:") for k, v in identity["id"].items()}
        context = ssl.create_default_context(cadata=pems["ca"])
        with tempfile.TemporaryDirectory() as keys:  # 0700: the key is written only there
            for name in ("cert", "key"):
                with open(os.path.join(keys, name), "w", encoding="utf-8", opener=_private) as f:
                    f.write(pems[name])
            context.load_cert_chain(os.path.join(keys, "cert"), os.path.join(keys, "key"))
        api = http.client.HTTPSConnection(
            url.hostname or "", url.port or 443, context=context, timeout=timeout
        )
        try:
            json_type = {"content-type": "application/json"}
            api.request("POST", "/edge/client/v1/authenticate?method=cert", body="{}", headers=json_type)
            token = json.loads(api.getresponse().read())["data"]["token"]
            session = {"zt-session": token}
            api.request("GET", "/edge/client/v1/services?limit=500", headers=session)
            listed = json.loads(api.getresponse().read())
            api.request("DELETE", "/edge/client/v1/current-api-session", headers=session)
            api.getresponse().read()
        finally:
            api.close()
        services = listed["data"]
        if listed["meta"]["pagination"]["totalCount"] > len(services):
            return None  # more than a page: not worth more requests here, let the SDK look
        return sorted(s["name"] for s in services if "Dial" in s.get("permissions", []))
    except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException):
        return None


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def main() -> int:
    print("SDK", zitilib.version(), flush=True)
    service = [a for a in sys.argv[1:] if a != "--paced"][1]
    names = dialable(sys.argv[1])
    if names is not None and service not in names:
        held = f"it may dial only {', '.join(names)}" if names else "it may dial no service at all"
        print(
            "DIAL_REFUSED",
            f"{service}: the controller does not let this identity dial it; {held}",
            flush=True,
        )
        return 5
    try:
        context = openziti.load(sys.argv[1])
    except TypeError:
        code = zitilib._ziti_lasterr()
        print("LOAD_FAILED", code, zitilib.errorstr(code) if code else "", flush=True)
        return 3
    print("LOADED", flush=True)
    paced = "--paced" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--paced"]
    service, size = args[1], int(args[2])
    dials = int(args[3]) if len(args) > 3 else 1
    results = []
    for number in range(dials):  # every dial, even after a failure
        if paced and number:
            print("READY", flush=True)
            sys.stdin.readline()  # the test changes something, then lets the next dial go
        results.append(dial_once(context, service, size))
    return 0 if all(results) else 5


if __name__ == "__main__":
    try:
        code = main()
    except BaseException as exc:
        print("DRIVER_ERROR", repr(exc), flush=True)
        code = 4
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
