"""Bind a service with the real OpenZiti SDK and echo what each caller sends; run by the SDK venv's
python.

Usage: ``bind_driver.py <identity.json> <service> [<connections>]``. Loads the identity, binds
the service, prints ``BOUND`` once listening (a thread already waits in ``accept()``: a Dial
arriving while nobody accepts may time out at the router), then for each accepted connection
prints ``ACCEPTED <caller>``, echoes until the caller's FIN, answers FIN (``shutdown(SHUT_WR)``:
``close()`` alone sends nothing with this wrapper) and prints ``ECHOED <bytes>``. After
``connections`` connections (default 1) it lingers a moment, prints ``DONE`` and exits 0; ``BIND_FAILED ...`` and
exit 3 otherwise. Ends with ``os._exit`` (the SDK's shutdown can hang).
"""

from __future__ import annotations

import os
import socket
import sys
import time

import openziti  # type: ignore[import-not-found]  # only installed in .venv-zsdk

zitilib = openziti.zitilib

#: How long the process stays after its last connection (see the end of main).
LINGER_SECONDS = 2.0


def main() -> int:
    print("SDK", zitilib.version(), flush=True)
    try:
        context = openziti.load(sys.argv[1])
    except TypeError:
        code = zitilib._ziti_lasterr()
        print("LOAD_FAILED", code, zitilib.errorstr(code) if code else "", flush=True)
        return 3
    service = sys.argv[2]
    wanted = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    try:
        server = context.bind(service)
        server.listen(8)
    except Exception as exc:  # the wrapper raises plain exceptions with the SDK's error text
        print("BIND_FAILED", repr(exc), flush=True)
        return 3
    print("BOUND", flush=True)
    for _ in range(wanted):
        conn, peer = server.accept()
        print("ACCEPTED", peer[0] if isinstance(peer, tuple) else peer, flush=True)
        total = 0
        while True:
            data = conn.recv(65536)
            if not data:
                break
            conn.sendall(data)
            total += len(data)
        conn.shutdown(socket.SHUT_WR)
        # This wrapper's bridge drops writes still queued when the socket closes ("write req in
        # invalid state[Closed]"): give the SDK a moment to send them before close().
        time.sleep(LINGER_SECONDS / 4)
        conn.close()
        print("ECHOED", total, flush=True)
    # The SDK forwards what the socket bridge wrote on its own loop: leave it time to send the
    # last echoes and the FIN before the process ends (os._exit drops whatever is unsent).
    time.sleep(LINGER_SECONDS)
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except BaseException as exc:
        print("DRIVER_ERROR", repr(exc), flush=True)
        code = 4
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
