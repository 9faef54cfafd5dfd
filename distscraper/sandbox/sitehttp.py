"""HTTP/1.1 plumbing of the sandbox site server: one thread per connection.

:class:`SiteHTTPServer` asks its :class:`Site` for each reply and reports each
request to it as a hit ``{"t", "host", "path", "status"}`` (``t`` is when the
request line arrived). It keeps connections alive, never logs to stderr (a bug
in the site prints its traceback once and answers 500), and can shut down every
open connection, so a stopped site really is down.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from distscraper.sandbox.sitehtml import Reply


class Site(Protocol):
    """What the HTTP server needs from the site it serves."""

    host: str
    port: int

    def record(self, hit: dict[str, Any]) -> None: ...

    def reply_for(self, path: str, host_header: str | None = None) -> Reply: ...


class SiteRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # idle keep-alive connections close after this
    disable_nagle_algorithm = True  # no 40 ms Nagle/delayed-ACK stalls on keep-alive
    wbufsize = 64 * 1024  # headers and body leave in one write (flushed per request)
    server: SiteHTTPServer
    _t0: float = 0.0

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def parse_request(self) -> bool:
        self._t0 = time.time()
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            status = int(code)
        except (TypeError, ValueError):
            status = 0
        host = self.headers.get("Host") if getattr(self, "headers", None) else None
        self.server.site.record({
            "t": self._t0 or time.time(),
            "host": host or f"{self.server.site.host}:{self.server.site.port}",
            "path": getattr(self, "path", ""),
            "status": status,
        })

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _answer(self, head: bool) -> None:
        try:
            reply = self.server.site.reply_for(self.path, self.headers.get("Host"))
        except Exception:  # a bug in the site: answer 500, show it once
            traceback.print_exc()
            reply = Reply(500, b"internal error", "text/plain")
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        for key, value in reply.headers:
            self.send_header(key, value)
        self.end_headers()
        if not head and reply.body:
            self.wfile.write(reply.body)


class SiteHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, address: tuple[str, int], site: Site) -> None:
        self.site = site
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, SiteRequestHandler)

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._conns_lock:
            (self._conns.add if alive else self._conns.discard)(conn)

    def close_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # client went away, server stopping: normal
            return
        super().handle_error(request, client_address)
