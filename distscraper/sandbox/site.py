"""The sandbox site over HTTP, with a log of every hit; ``python -m distscraper.sandbox.site``.

:class:`SiteServer` serves a :class:`SiteSpec` (the pure generator in
:mod:`.sitegen`) over HTTP/1.1 from a background thread and records every
request as ``{"t", "host", "path", "status"}`` (a JSON line in ``hits_path``,
flushed per line, and in memory). It adds what a spec cannot: flaky and
rate-limited pages fail a set number of times before they answer, slow pages
sleep. ``python -m distscraper.sandbox.site`` runs one in its own process.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

# (the generator's names are re-exported: tests and benchmarks import them from here)
from distscraper.sandbox.sitegen import SiteSpec
from distscraper.sandbox.sitegraph import DISALLOWED_PREFIX as DISALLOWED_PREFIX, EXTRA_LINKS
from distscraper.sandbox.sitehits import HitLog, read_hits
from distscraper.sandbox.sitehtml import HTML as HTML, Reply, float_arg, int_arg
from distscraper.sandbox.sitehttp import SiteHTTPServer
from distscraper.sandbox.sitespecial import MAX_BIG_KB as MAX_BIG_KB

__all__ = ["EXTRA_LINKS", "Reply", "SiteSpec", "SiteServer", "read_hits", "main"]

MAX_SLOW_SECONDS = 60.0


class _Counters:
    """Per-name failure counters for /flaky and /ratelimit (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def take(self, key: str, limit: int) -> bool:
        """True (and count it) while ``key`` has answered an error fewer than ``limit`` times."""
        with self._lock:
            done = self._counts.get(key, 0)
            if done >= limit:
                return False
            self._counts[key] = done + 1
            return True

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


@dataclass
class SiteServer:
    """Serves a :class:`SiteSpec` on ``host:port`` from a daemon thread and logs every hit.

    ``port=0`` picks a free port. Two servers bound to 127.0.0.1 and 127.0.0.2
    on the same port act as two domains. ``stop()`` also closes open keep-alive
    connections, so a stopped site really is down.
    """

    spec: SiteSpec = field(default_factory=SiteSpec)
    host: str = "127.0.0.1"
    port: int = 0
    hits_path: str | Path | None = None

    def __post_init__(self) -> None:
        self._httpd: SiteHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._log = HitLog()
        self.counters = _Counters()

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>`` (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.base_url + path

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def start(self) -> Self:
        """Bind and serve in a background thread; returns once listening."""
        if self._httpd is not None:
            return self
        httpd = SiteHTTPServer((self.host, self.port), self)
        self.port = int(httpd.server_address[1])
        if self.hits_path is not None:
            self._log.open(self.hits_path)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"site-{self.host}:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and close open connections; the port and counters are kept."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if self._thread is not None:
            self._thread.join(5)
        self._log.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- hits ----------------------------------------------------------------
    def record(self, hit: dict[str, Any]) -> None:
        self._log.record(hit)

    def hits(self) -> list[dict[str, Any]]:
        """Every request so far: from the hit log file if there is one, else from memory."""
        if self.hits_path is not None:
            return read_hits(self.hits_path)
        return self._log.in_memory()

    # --- answers -------------------------------------------------------------
    def reply_for(self, path: str, host_header: str | None = None) -> Reply:
        """The reply to a GET of ``path``, with server state (flaky, rate limit, slow)."""
        base_url = f"http://{host_header}" if host_header else self.base_url
        split = urlsplit(path)
        route, query = split.path, split.query
        if route.startswith("/flaky/"):
            if self.counters.take(route, int_arg(query, "fails", 1, 0, 1_000_000)):
                return Reply(503, b"<html><body><h1>503 Service Unavailable</h1></body></html>")
        elif route.startswith("/ratelimit/"):
            if self.counters.take(route, int_arg(query, "n", 1, 0, 1_000_000)):
                return Reply(429, b"<html><body><h1>429 Too Many Requests</h1></body></html>",
                             headers=(("Retry-After", "1"),))
        elif route == "/slow":
            time.sleep(float_arg(query, "s", 1.0, 0.0, MAX_SLOW_SECONDS))
        return self.spec.render(path, base_url)


# --- CLI ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Serve a site until SIGTERM/SIGINT; print ``READY <base_url>`` once listening."""
    parser = argparse.ArgumentParser(prog="python -m distscraper.sandbox.site",
                                     description="Serve a generated sandbox site.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pages", type=int, default=SiteSpec.pages)
    parser.add_argument("--categories", type=int, default=SiteSpec.categories)
    parser.add_argument("--seed", type=int, default=SiteSpec.seed)
    parser.add_argument("--crawl-delay", type=float, default=None)
    parser.add_argument("--extras", action="store_true")
    parser.add_argument("--hits", default=None, help="append one JSON line per request here")
    args = parser.parse_args(argv)

    spec = SiteSpec(seed=args.seed, pages=args.pages, categories=args.categories,
                    crawl_delay=args.crawl_delay, extras=args.extras)
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = SiteServer(spec, host=args.host, port=args.port, hits_path=args.hits).start()
    print(f"READY {server.base_url}", flush=True)
    try:
        while not done.wait(0.5):
            pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
