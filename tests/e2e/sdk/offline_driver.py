"""Hold connections open and dial on command with the real OpenZiti SDK; run by the SDK venv's
python (tests/e2e/test_offline_router.py: the controller is killed while this runs).

Usage: ``offline_driver.py <identity.json>``. Loads the identity (the controller must be up
then), prints ``LOADED``, then reads one command a line from stdin and answers each with one line:

- ``open <name> <service>``: connects a Ziti socket to the service and keeps it as ``name``;
  ``OPEN <name>`` or ``DIAL_FAILED <rc> <code> <text>``.
- ``send <name> <bytes>``: sends that many pseudo-random bytes on ``name`` and waits for them to
  come back (the service echoes); ``SENT <name> <sent> <received> <same>``.
- ``dial <service> <bytes>``: a connection of its own: connects, sends, waits for the echo,
  half-closes, reads to EOF; ``ECHO <sent> <received> <same>`` or ``DIAL_FAILED ...``.
- ``close <name>``: half-closes ``name``, reads to EOF; ``CLOSED <name> <bytes received>``.
- ``eof <name> <seconds>``: waits up to that long for ``name`` to end from the other side (the
  router closed it); ``EOF <name> <bytes received>`` or ``STILL <name>``.
- ``quit``: ends (exit 0).

Ends with ``os._exit`` (the SDK's shutdown can hang).
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading

import openziti  # type: ignore[import-not-found]  # only installed in .venv-zsdk

zitilib = openziti.zitilib

#: How long a send waits for its echo.
ECHO_WAIT_SECONDS = 30.0


def payload(size: int, seed: bytes) -> bytes:
    out = bytearray()
    block = seed
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


class Held:
    """A connection and what has come back on it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.received = bytearray()
        self.changed = threading.Condition()
        self.eof = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            with self.changed:
                if not chunk:
                    self.eof = True
                    self.changed.notify_all()
                    return
                self.received.extend(chunk)
                self.changed.notify_all()

    def exchange(self, data: bytes) -> bytes:
        """Send ``data``; what came back for it (up to its length, within the wait)."""
        with self.changed:
            start = len(self.received)
        self.sock.sendall(data)
        with self.changed:
            self.changed.wait_for(
                lambda: len(self.received) - start >= len(data) or self.eof, ECHO_WAIT_SECONDS
            )
            return bytes(self.received[start : start + len(data)])

    def ended(self, seconds: float) -> bool:
        """Whether the other side ended the connection, waiting up to ``seconds``."""
        with self.changed:
            return self.changed.wait_for(lambda: self.eof, seconds)

    def finish(self) -> int:
        self.sock.shutdown(socket.SHUT_WR)
        self.thread.join(ECHO_WAIT_SECONDS)
        self.sock.close()
        return len(self.received)


def connect(context: object, service: str) -> Held | None:
    fd = zitilib.ziti_socket(socket.SOCK_STREAM)
    rc = zitilib._ziti_connect(fd, context._ctx, service.encode(), None)  # type: ignore[attr-defined]
    if rc != 0:
        code = zitilib._ziti_lasterr()
        print("DIAL_FAILED", rc, code, zitilib.errorstr(code) if code else "", flush=True)
        return None
    return Held(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fd))


def main() -> int:
    print("SDK", zitilib.version(), flush=True)
    try:
        context = openziti.load(sys.argv[1])
    except TypeError:
        code = zitilib._ziti_lasterr()
        print("LOAD_FAILED", code, zitilib.errorstr(code) if code else "", flush=True)
        return 3
    print("LOADED", flush=True)
    held: dict[str, Held] = {}
    rounds = 0
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        command, args = words[0], words[1:]
        rounds += 1
        if command == "quit":
            break
        if command == "open":
            conn = connect(context, args[1])
            if conn is not None:
                held[args[0]] = conn
                print("OPEN", args[0], flush=True)
        elif command == "send":
            data = payload(int(args[1]), f"send {rounds}".encode())
            back = held[args[0]].exchange(data)
            print("SENT", args[0], len(data), len(back), int(back == data), flush=True)
        elif command == "dial":
            conn = connect(context, args[0])
            if conn is not None:
                data = payload(int(args[1]), f"dial {rounds}".encode())
                back = conn.exchange(data)
                conn.finish()
                print("ECHO", len(data), len(back), int(back == data), flush=True)
        elif command == "eof":
            conn = held[args[0]]
            if conn.ended(float(args[1])):
                print("EOF", args[0], len(conn.received), flush=True)
            else:
                print("STILL", args[0], flush=True)
        elif command == "close":
            print("CLOSED", args[0], held.pop(args[0]).finish(), flush=True)
        else:
            print("UNKNOWN", command, flush=True)
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
