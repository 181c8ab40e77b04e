"""Load an enrolled identity with the real OpenZiti SDK; run by the SDK venv's python.

Usage: ``load_driver.py <identity.json> [<host> <port>]... [--dial <service>]``. ``openziti.load`` authenticates with
the identity's certificate and returns only after the SDK's first service event, i.e. once a
services listing has shown at least one service (0.29.3 has no timeout: with no service, or
if the listing never completes, it blocks, so the caller bounds this process). Prints
``LOADED`` (exit 0) or ``LOAD_FAILED <code> <text>`` (exit 3; the wrapper raises TypeError when
the context fails, e.g. a 401 on cert login). For each ``host port`` it then prints
``RESOLVE <host> <address or None>``: ``Ziti_resolve`` answers a 100.64.x.x address for an
intercept address of a service the identity may dial. ``--dial <service>`` connects a Ziti
socket to the service and prints ``DIAL <rc> <last error>`` (without a running edge router the
SDK creates its Dial session with the controller, then fails to reach a router). Ends with ``os._exit`` (the SDK's shutdown can hang,
docs/api.md §13).
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys

import openziti  # type: ignore[import-not-found]  # only installed in .venv-zsdk

zitilib = openziti.zitilib


class AddrInfo(ctypes.Structure):
    """``struct addrinfo`` (Linux layout), for ``Ziti_resolve``."""

    _fields_ = (
        ("flags", ctypes.c_int),
        ("family", ctypes.c_int),
        ("socktype", ctypes.c_int),
        ("proto", ctypes.c_int),
        ("addrlen", ctypes.c_uint32),
        ("addr", ctypes.c_void_p),
        ("canonname", ctypes.c_char_p),
        ("next", ctypes.c_void_p),
    )


def resolve(host: str, port: str) -> str | None:
    """The IPv4 address the SDK assigns to ``host:port``, or None if no service intercepts it."""
    result, hints = ctypes.POINTER(AddrInfo)(), AddrInfo(socktype=socket.SOCK_STREAM)
    code = zitilib.ziti.Ziti_resolve(host.encode(), port.encode(), ctypes.byref(hints), ctypes.byref(result))
    if code != 0 or not result:
        return None
    sockaddr = ctypes.cast(result.contents.addr, ctypes.POINTER(ctypes.c_uint8 * 8)).contents
    return ".".join(str(octet) for octet in sockaddr[4:8])


def main() -> int:
    print("SDK", zitilib.version(), flush=True)
    try:
        context = openziti.load(sys.argv[1])
    except TypeError:
        code = zitilib._ziti_lasterr()
        print("LOAD_FAILED", code, zitilib.errorstr(code) if code else "", flush=True)
        return 3
    print("LOADED", flush=True)
    args = sys.argv[2:]
    dial = None
    if "--dial" in args:
        at = args.index("--dial")
        dial = args[at + 1]
        args = args[:at] + args[at + 2 :]
    for host, port in zip(args[::2], args[1::2], strict=False):
        print("RESOLVE", host, resolve(host, port), flush=True)
    if dial is not None:
        fd = zitilib.ziti_socket(socket.SOCK_STREAM)
        rc = zitilib._ziti_connect(fd, context._ctx, dial.encode(), None)
        print("DIAL", rc, zitilib._ziti_lasterr(), flush=True)
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
