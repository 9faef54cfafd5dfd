"""The dashboard's web server: one self-contained page and two read-only JSON endpoints.

* ``GET /`` — ``dashboard.html`` (inline CSS/JS, inline SVG charts, no external
  resources), which polls the endpoints below every 2 s;
* ``GET /api/status`` — the same dict as ``scrapy status --json``;
* ``GET /api/history?limit=N`` — the newest N (default 720) cluster samples of
  ``<prefix>:history``, oldest first.

A ``ThreadingHTTPServer``: each request runs in its own thread and they share
one :class:`~distscraper.monitor.source.StatusSource` (thread-safe clients).
Nothing here writes to Redis or MongoDB.
"""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis

from distscraper.monitor.source import StatusSource

logger = logging.getLogger(__name__)

MAX_HISTORY = 720


def page() -> bytes:
    """The dashboard's HTML."""
    return resources.files("distscraper.monitor").joinpath("dashboard.html").read_bytes()


class DashboardServer(ThreadingHTTPServer):
    """Serves the dashboard of one cluster (see module docstring)."""

    daemon_threads = True

    def __init__(self, source: StatusSource, host: str = "127.0.0.1", port: int = 8089) -> None:
        self.source = source
        self.html = page()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self.reply(200, self.server.html, "text/html; charset=utf-8")
        elif url.path == "/api/status":
            self.json_reply(lambda: self.server.source.status())
        elif url.path == "/api/history":
            limit = _int(parse_qs(url.query).get("limit", [""])[0], MAX_HISTORY)
            self.json_reply(lambda: self.server.source.history(min(max(limit, 1), MAX_HISTORY)))
        else:
            self.reply(404, b'{"error": "not found"}', "application/json")

    def json_reply(self, read: Any) -> None:
        try:
            body, code = json.dumps(read(), sort_keys=True).encode(), 200
        except redis.RedisError as exc:
            body = json.dumps({"error": f"cannot read Redis at {self.server.source.redis_url}: {exc}"}).encode()
            code = 503
        self.reply(code, body, "application/json")

    def reply(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        logger.debug("%s %s", self.address_string(), format % args)


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default
