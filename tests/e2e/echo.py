"""A plain threaded TCP echo server on 127.0.0.1: what the hosting tunnelers of the ``ziti`` tests
and of ``python -m bench peer`` connect to."""

from __future__ import annotations

import socket
import threading


class EchoServer:
    """What a connection reads it writes back; at EOF it half-closes too. A thread per
    connection, each read bounded by ``timeout`` seconds; counts the connections it accepted."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, name="echo-server", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(self.timeout)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                while data := conn.recv(262144):
                    conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()
