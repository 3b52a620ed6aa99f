"""A TCP proxy that can cut a database server away and bring it back: an outage on demand.

For the fault checks (`fault_check.py`) and the tests: autotune talks to a real
PostgreSQL through `Proxy`; `cut()` drops every connection and answers new
ones by closing them (what a client sees while a server restarts), `restore()`
serves again. The server itself is never touched, so other users of it go on.
Standard library only.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from typing import Self


class Proxy:
    """Forwards 127.0.0.1:`port` to `target` until closed; `cut` and `restore` an outage."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()
        self._down = False
        self._closed = False
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def url(self, url: str) -> str:
        """A SQLAlchemy URL of the target, pointed at this proxy instead."""
        from sqlalchemy.engine import make_url

        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(
            hide_password=False)

    def cut(self) -> None:
        """Drop every connection; new ones are closed at once until `restore`."""
        with self._lock:
            self._down = True
            live, self._live = self._live, set()
        for sock in live:
            _close(sock)

    def restore(self) -> None:
        """Serve new connections again."""
        with self._lock:
            self._down = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                down = self._down
            if down:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._live.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy bytes one way until either side closes; then close both."""
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with self._lock:
                self._live.discard(sock)
            _close(sock)


def _close(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with suppress(OSError):
        sock.close()
