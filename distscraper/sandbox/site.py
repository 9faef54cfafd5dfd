"""A generated, reproducible local web site to crawl, with a log of every hit.

:class:`SiteSpec` is a pure generator: for a given spec every page (status,
headers, body) and the whole link graph are always the same, and
:meth:`SiteSpec.expected_paths` says which paths a robots-obeying crawler that
starts at ``/`` must end up with, without crawling.

Link graph: ``/`` -> every category ``/cat/<c>/`` (+ ``/private/x``, disallowed
by robots.txt) -> listing pages ``/cat/<c>/page/<n>`` (next/prev) -> detail
pages ``/item/<id>`` -> 2-4 related items, their category, and for some items
``/missing/<k>`` (404). With ``extras=True`` the home page also links the
special pages (:data:`EXTRA_LINKS`); they are served either way.

:class:`SiteServer` serves a spec over HTTP/1.1 from a background thread and
records every request as ``{"t", "host", "path", "status"}`` (a JSON line in
``hits_path``, flushed per line, and in memory). ``python -m
distscraper.sandbox.site`` runs one in its own process.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import random
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import zlib
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Callable, Self
from urllib.parse import parse_qs, urlsplit

__all__ = ["EXTRA_LINKS", "Reply", "SiteSpec", "SiteServer", "read_hits", "main"]

#: Special pages linked from ``/`` when ``SiteSpec.extras`` is true.
EXTRA_LINKS: tuple[str, ...] = (
    "/sitemap.xml",
    "/slow?s=2",
    "/flaky/extras?fails=2",
    "/ratelimit/extras?n=2",
    "/fail/extras",
    "/status/403",
    "/status/410",
    "/files/1.pdf",
    "/files/2.pdf",
    "/image.png",
    "/empty",
    "/broken-encoding",
    "/big?kb=256",
    "/loop/a",
    "/redirect/1",
)

DISALLOWED_PREFIX = "/private/"
MAX_SLOW_SECONDS = 60.0
MAX_BIG_KB = 64 * 1024

HTML = "text/html; charset=utf-8"

_WORDS = (
    "amber anchor apex arbor atlas beacon birch breeze canyon cedar cinder citrus cobalt coral "
    "crest delta drift ember falcon fern fjord flint garnet glacier granite harbor hazel horizon "
    "indigo iris jade juniper kelp lagoon lantern lark linen lotus maple marble meadow mesa mist "
    "nectar nimbus oak onyx orchid pebble pine plume prairie quartz quill raven reef ridge river "
    "saffron sage sierra slate sparrow spruce summit tidal timber topaz tundra umber valley velvet "
    "willow zenith").split()
_ADJECTIVES = (
    "ancient bold bright calm clever crisp dapper eager fancy gentle grand hardy humble jolly "
    "keen lively lucky mellow nimble noble plain proud quiet rapid rustic shiny sleek smooth "
    "solid sturdy swift tidy vivid warm wild").split()


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: status, content type, body and extra headers."""

    status: int
    body: bytes = b""
    content_type: str = HTML
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


@dataclass(frozen=True)
class SiteSpec:
    """The parameters of a generated site; equal specs give identical sites."""

    seed: int = 1
    pages: int = 2000
    categories: int = 20
    per_page: int = 25
    missing_links: int = 20
    crawl_delay: float | None = None
    extras: bool = False

    def __post_init__(self) -> None:
        if self.pages < 1 or self.categories < 1 or self.per_page < 1:
            raise ValueError("pages, categories and per_page must be >= 1")
        if self.missing_links < 0:
            raise ValueError("missing_links must be >= 0")
        if self.crawl_delay is not None and self.crawl_delay < 0:
            raise ValueError("crawl_delay must be >= 0")

    # --- graph ---------------------------------------------------------------
    def links(self, path: str) -> list[str]:
        """The links (paths) on the page at ``path``, in page order; [] for non-HTML or 404."""
        return list(_graph(self).links(path))

    def allowed(self, path: str) -> bool:
        """Whether robots.txt allows crawling ``path``."""
        return not path.startswith(DISALLOWED_PREFIX)

    def expected_statuses(self) -> dict[str, int]:
        """Every path a robots-obeying crawler reaches from ``/``, with its final status.

        Redirect sources are left out (their targets are reached instead), as is
        the redirect loop; flaky and rate-limited pages count with their final 200.
        """
        graph = _graph(self)
        out: dict[str, int] = {}
        seen = {"/"}
        queue = deque(["/"])
        while queue:
            path = queue.popleft()
            status = graph.status(path)
            if status is None:  # a special page: ask the renderer
                reply = self.render(path)
                location = reply.header("Location")
                if 300 <= reply.status < 400 and location:
                    found = [location]
                else:
                    out[path] = reply.status
                    found = []
            else:
                out[path] = status
                found = list(graph.links(path))
            for link in found:
                if link not in seen and self.allowed(link):
                    seen.add(link)
                    queue.append(link)
        return out

    def expected_paths(self) -> set[str]:
        """Paths (with query) a crawler stores an item for, 404s included, robots-disallowed excluded."""
        return set(self.expected_statuses())

    def expected_ok_paths(self) -> set[str]:
        """The subset of :meth:`expected_paths` whose final status is 200."""
        return {p for p, s in self.expected_statuses().items() if s == 200}

    def expected_urls(self, base_url: str) -> set[str]:
        """:meth:`expected_paths` as absolute URLs under ``base_url``."""
        base = base_url.rstrip("/")
        return {base + p for p in self.expected_paths()}

    # --- pages ---------------------------------------------------------------
    def render(self, path: str, base_url: str = "") -> Reply:
        """The reply for ``path`` (with query), ignoring server state.

        Flaky, rate-limited and slow pages render as their eventual 200 page:
        :class:`SiteServer` adds the failures and the sleep. ``base_url`` makes
        canonical links and sitemap entries absolute.
        """
        split = urlsplit(path)
        route = split.path
        if route == "/big":
            return _big(_int_arg(split.query, "kb", 100, 0, MAX_BIG_KB))
        if route in _STATIC_ROUTES:
            return _STATIC_ROUTES[route](self, base_url)
        return _render_cached(self, route, split.query, base_url)


# --- the graph ------------------------------------------------------------------


class _Graph:
    """Category assignment, related items and missing links of one spec."""

    def __init__(self, spec: SiteSpec) -> None:
        self.spec = spec
        rng = random.Random(spec.seed)
        ids = list(range(1, spec.pages + 1))
        rng.shuffle(ids)
        self.category_of: dict[int, int] = {}
        self.items_in: dict[int, list[int]] = {c: [] for c in range(1, spec.categories + 1)}
        for index, item in enumerate(ids):
            cat = index % spec.categories + 1
            self.category_of[item] = cat
            self.items_in[cat].append(item)
        for items in self.items_in.values():
            items.sort()
        self.related: dict[int, list[int]] = {}
        for item in range(1, spec.pages + 1):
            want = min(rng.randint(2, 4), spec.pages - 1)
            picks: list[int] = []
            while len(picks) < want:
                other = rng.randint(1, spec.pages)
                if other != item and other not in picks:
                    picks.append(other)
            self.related[item] = picks
        self.missing_of: dict[int, list[int]] = {}
        for k in range(1, spec.missing_links + 1):
            self.missing_of.setdefault(rng.randint(1, spec.pages), []).append(k)

    def listing_pages(self, cat: int) -> int:
        return max(1, math.ceil(len(self.items_in[cat]) / self.spec.per_page))

    @staticmethod
    def listing_path(cat: int, page: int) -> str:
        return f"/cat/{cat}/" if page == 1 else f"/cat/{cat}/page/{page}"

    def parse(self, path: str) -> tuple[str, int, int] | None:
        """("home"|"listing"|"item"|"missing", a, b) for graph pages, else None."""
        if path == "/":
            return ("home", 0, 0)
        parts = path.strip("/").split("/")
        try:
            if parts[0] == "item" and len(parts) == 2 and path[-1] != "/":
                item = int(parts[1])
                return ("item", item, 0) if str(item) == parts[1] and item in self.category_of else None
            if parts[0] == "missing" and len(parts) == 2:
                return ("missing", int(parts[1]), 0)
            if parts[0] == "cat":
                cat = int(parts[1])
                if cat not in self.items_in or str(cat) != parts[1]:
                    return None
                if len(parts) == 2 and path.endswith("/"):
                    return ("listing", cat, 1)
                if len(parts) == 4 and parts[2] == "page" and not path.endswith("/"):
                    page = int(parts[3])
                    if str(page) == parts[3] and 1 <= page <= self.listing_pages(cat):
                        return ("listing", cat, page)
        except (ValueError, IndexError):
            return None
        return None

    def status(self, path: str) -> int | None:
        """200/404 for graph pages, None for anything else."""
        parsed = self.parse(path)
        if parsed is None:
            return None
        return 404 if parsed[0] == "missing" else 200

    def links(self, path: str) -> tuple[str, ...]:
        parsed = self.parse(path)
        if parsed is None:
            return ()
        kind, a, b = parsed
        if kind == "home":
            links = [self.listing_path(c, 1) for c in self.items_in] + ["/private/x"]
            if self.spec.extras:
                links += EXTRA_LINKS
            return tuple(links)
        if kind == "listing":
            links = ["/"]
            if b > 1:
                links.append(self.listing_path(a, b - 1))
            start = (b - 1) * self.spec.per_page
            links += [f"/item/{i}" for i in self.items_in[a][start:start + self.spec.per_page]]
            if b < self.listing_pages(a):
                links.append(self.listing_path(a, b + 1))
            return tuple(links)
        if kind == "item":
            links = ["/", self.listing_path(self.category_of[a], 1)]
            links += [f"/item/{i}" for i in self.related[a]]
            links += [f"/missing/{k}" for k in self.missing_of.get(a, ())]
            return tuple(links)
        return ()


@lru_cache(maxsize=16)
def _graph(spec: SiteSpec) -> _Graph:
    return _Graph(spec)


# --- HTML -----------------------------------------------------------------------


def _text(rng: random.Random, words: int) -> str:
    out = [rng.choice(_WORDS) for _ in range(words)]
    return " ".join(out).capitalize() + "."


def _paragraphs(rng: random.Random, count: int) -> str:
    return "".join(f"<p>{_text(rng, rng.randint(12, 40))}</p>\n" for _ in range(count))


def _item_name(spec: SiteSpec, item: int) -> str:
    rng = random.Random(f"{spec.seed}|name|{item}")
    return f"{rng.choice(_ADJECTIVES).capitalize()} {rng.choice(_WORDS).capitalize()} #{item}"


def _page(title: str, description: str, canonical: str, body: str) -> bytes:
    esc = html.escape
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{esc(title)}</title>\n"
        f"<meta name=\"description\" content=\"{esc(description)}\">\n"
        f"<link rel=\"canonical\" href=\"{esc(canonical)}\">\n"
        f"</head>\n<body>\n{body}</body>\n</html>\n"
    ).encode("utf-8")


def _link_list(items: list[tuple[str, str]]) -> str:
    lis = "".join(f"<li><a href=\"{html.escape(h)}\">{html.escape(t)}</a></li>\n" for h, t in items)
    return f"<ul>\n{lis}</ul>\n"


def _not_found(path: str, base_url: str) -> Reply:
    body = (f"<h1>Not found</h1>\n<h2>Error 404</h2>\n"
            f"<p>There is no page at {html.escape(path)}.</p>\n")
    return Reply(404, _page("404 Not found", f"No page at {path}", base_url + path, body))


@lru_cache(maxsize=8192)
def _render_cached(spec: SiteSpec, route: str, query: str, base_url: str) -> Reply:
    graph = _graph(spec)
    parsed = graph.parse(route)
    if parsed is None:
        return _render_special(spec, route, query, base_url)
    kind, a, b = parsed
    canonical = base_url + (graph.listing_path(a, b) if kind == "listing" else route)
    rng = random.Random(f"{spec.seed}|{route}")
    if kind == "home":
        cats = [(graph.listing_path(c, 1), f"Category {c}") for c in graph.items_in]
        extras = [(p, p) for p in EXTRA_LINKS] if spec.extras else []
        body = ("<h1>Sandbox shop</h1>\n<h2>Categories</h2>\n" + _link_list(cats)
                + _paragraphs(rng, 2)
                + "<h2>Members</h2>\n" + _link_list([("/private/x", "Private area")])
                + ("<h2>Special pages</h2>\n" + _link_list(extras) if extras else ""))
        return Reply(200, _page("Sandbox shop", "A generated site for crawler tests.", canonical, body))
    if kind == "listing":
        pages = graph.listing_pages(a)
        start = (b - 1) * spec.per_page
        items = [(f"/item/{i}", _item_name(spec, i))
                 for i in graph.items_in[a][start:start + spec.per_page]]
        nav = "<nav><a href=\"/\">Home</a>"
        if b > 1:
            nav += f" <a rel=\"prev\" href=\"{graph.listing_path(a, b - 1)}\">Previous</a>"
        if b < pages:
            nav += f" <a rel=\"next\" href=\"{graph.listing_path(a, b + 1)}\">Next</a>"
        nav += "</nav>\n"
        body = (f"<h1>Category {a}</h1>\n<h2>Page {b} of {pages}</h2>\n" + _paragraphs(rng, 1)
                + _link_list(items) + nav)
        title = f"Category {a} - page {b}"
        return Reply(200, _page(title, f"Items of category {a}, page {b} of {pages}.", canonical, body))
    if kind == "item":
        name = _item_name(spec, a)
        cat = graph.category_of[a]
        description = _text(rng, 14)
        related = [(f"/item/{i}", _item_name(spec, i)) for i in graph.related[a]]
        missing = [(f"/missing/{k}", f"Archived page {k}") for k in graph.missing_of.get(a, ())]
        body = (f"<nav><a href=\"/\">Home</a> &gt; <a href=\"{graph.listing_path(cat, 1)}\">"
                f"Category {cat}</a></nav>\n<h1>{html.escape(name)}</h1>\n"
                f"<p class=\"price\">{rng.randint(1, 999)}.{rng.randint(0, 99):02d} EUR</p>\n"
                "<h2>Description</h2>\n" + _paragraphs(rng, rng.randint(2, 4))
                + "<h2>Details</h2>\n" + _paragraphs(rng, 1)
                + "<h2>Related items</h2>\n" + _link_list(related)
                + ("<h2>See also</h2>\n" + _link_list(missing) if missing else ""))
        return Reply(200, _page(f"{name} - Category {cat}", description, canonical, body))
    return _not_found(route, base_url)


def _int_arg(query: str, name: str, default: int, low: int, high: int) -> int:
    try:
        value = int(parse_qs(query).get(name, [default])[0])
    except ValueError:
        value = default
    return max(low, min(high, value))


def _float_arg(query: str, name: str, default: float, low: float, high: float) -> float:
    try:
        value = float(parse_qs(query).get(name, [default])[0])
    except ValueError:
        value = default
    return max(low, min(high, value)) if math.isfinite(value) else default


def _simple(status: int, title: str, text: str, base_url: str, route: str) -> Reply:
    body = f"<h1>{html.escape(title)}</h1>\n<h2>{status}</h2>\n<p>{html.escape(text)}</p>\n"
    return Reply(status, _page(title, text, base_url + route, body))


def _render_special(spec: SiteSpec, route: str, query: str, base_url: str) -> Reply:
    """Special pages with a path parameter; the eventual 200 page for flaky/ratelimit/slow."""
    parts = route.strip("/").split("/")
    head, arg = parts[0], ("/".join(parts[1:]) if len(parts) > 1 else "")
    if head == "private" and len(parts) > 1:
        return _simple(200, "Private", "Members only: crawlers obeying robots.txt never see this.",
                       base_url, route)
    if head in ("flaky", "ratelimit") and len(parts) == 2 and arg:
        return _simple(200, f"{head.capitalize()} {arg}", "Answered at last.", base_url, route)
    if route == "/slow":
        return _simple(200, "Slow", "This page took its time.", base_url, route)
    if head == "fail" and len(parts) == 2 and arg:
        return _simple(500, "Server error", "This page always fails.", base_url, route)
    if head == "status" and len(parts) == 2 and arg.isdigit() and 200 <= int(arg) <= 599:
        code = int(arg)
        if code in (204, 304):
            return Reply(code, b"")
        return _simple(code, f"Status {code}", f"This page answers {code}.", base_url, route)
    if head == "loop" and arg in ("a", "b"):
        return Reply(302, b"", headers=(("Location", "/loop/" + ("b" if arg == "a" else "a")),))
    if head == "redirect" and len(parts) == 2 and arg.isdigit():
        return Reply(302, b"", headers=(("Location", f"/item/{int(arg)}"),))
    if head == "files" and len(parts) == 2 and arg.endswith(".pdf") and len(arg) > 4:
        return _pdf(arg[:-4])
    return _not_found(route, base_url)


def _robots(spec: SiteSpec, base_url: str) -> Reply:
    lines = ["User-agent: *", f"Disallow: {DISALLOWED_PREFIX}"]
    if spec.crawl_delay is not None:
        lines.append(f"Crawl-delay: {spec.crawl_delay:g}")
    if base_url:
        lines.append(f"Sitemap: {base_url}/sitemap.xml")
    return Reply(200, ("\n".join(lines) + "\n").encode(), "text/plain; charset=utf-8")


def _sitemap(spec: SiteSpec, base_url: str) -> Reply:
    graph = _graph(spec)
    paths = ["/"] + [graph.listing_path(c, 1) for c in graph.items_in]
    paths += [f"/item/{i}" for i in range(1, spec.pages + 1)]
    urls = "".join(f"<url><loc>{html.escape(base_url + p)}</loc></url>\n" for p in paths)
    body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n"
            f"{urls}</urlset>\n")
    return Reply(200, body.encode(), "application/xml")


def _pdf(name: str) -> Reply:
    rng = random.Random(f"pdf|{name}")
    filler = " ".join(rng.choice(_WORDS) for _ in range(200))
    body = (f"%PDF-1.4\n% distscraper sandbox file {name}\n"
            f"1 0 obj << /Title ({name}) >> endobj\n% {filler}\n%%EOF\n").encode("latin-1", "replace")
    return Reply(200, body, "application/pdf")


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\x2a\x7f\xd4")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


_PNG = _png()


def _big(kb: int) -> Reply:
    """An HTML page of exactly ``kb`` KiB (or its bare skeleton when that is larger)."""
    head = b"<!DOCTYPE html>\n<html><head><title>Big page</title></head><body><h1>Big page</h1>\n"
    tail = b"</body></html>\n"
    para = b"<p>" + " ".join(_WORDS[:16]).encode() + b"</p>\n"
    room = kb * 1024 - len(head) - len(tail)
    filler = (para * (room // len(para) + 1))[:room] if room > 0 else b""
    return Reply(200, head + filler + tail)


_STATIC_ROUTES: dict[str, Callable[[SiteSpec, str], Reply]] = {
    "/robots.txt": _robots,
    "/sitemap.xml": _sitemap,
    "/image.png": lambda spec, base: Reply(200, _PNG, "image/png"),
    "/empty": lambda spec, base: Reply(200, b"", HTML),
    "/broken-encoding": lambda spec, base: Reply(
        200, b"<!DOCTYPE html>\n<html><head><title>Broken \xff\xfe encoding</title></head>"
             b"<body><h1>Broken \xc3\x28 bytes</h1><p>Invalid UTF-8: \x80\x81\xfe\xff</p>"
             b"</body></html>\n", HTML),
}


# --- the server -----------------------------------------------------------------


def read_hits(path: str | Path) -> list[dict[str, Any]]:
    """The hits in a JSON-lines hit log (a partly written last line is skipped)."""
    out: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        pass
    return out


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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # idle keep-alive connections close after this
    disable_nagle_algorithm = True  # no 40 ms Nagle/delayed-ACK stalls on keep-alive
    wbufsize = 64 * 1024  # headers and body leave in one write (flushed per request)
    server: "_HTTPServer"
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


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, address: tuple[str, int], site: "SiteServer") -> None:
        self.site = site
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, _Handler)

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
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._hits: list[dict[str, Any]] = []
        self._hits_lock = threading.Lock()
        self._hits_file: Any = None
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
        httpd = _HTTPServer((self.host, self.port), self)
        self.port = int(httpd.server_address[1])
        if self.hits_path is not None:
            Path(self.hits_path).parent.mkdir(parents=True, exist_ok=True)
            self._hits_file = open(self.hits_path, "a", encoding="utf-8")
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
        with self._hits_lock:
            if self._hits_file is not None:
                self._hits_file.close()
                self._hits_file = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- hits ----------------------------------------------------------------
    def record(self, hit: dict[str, Any]) -> None:
        line = json.dumps(hit, separators=(",", ":")) + "\n"
        with self._hits_lock:
            self._hits.append(hit)
            if self._hits_file is not None:
                self._hits_file.write(line)
                self._hits_file.flush()

    def hits(self) -> list[dict[str, Any]]:
        """Every request so far: from the hit log file if there is one, else from memory."""
        if self.hits_path is not None:
            return read_hits(self.hits_path)
        with self._hits_lock:
            return list(self._hits)

    # --- answers -------------------------------------------------------------
    def reply_for(self, path: str, host_header: str | None = None) -> Reply:
        """The reply to a GET of ``path``, with server state (flaky, rate limit, slow)."""
        base_url = f"http://{host_header}" if host_header else self.base_url
        split = urlsplit(path)
        route, query = split.path, split.query
        if route.startswith("/flaky/"):
            if self.counters.take(route, _int_arg(query, "fails", 1, 0, 1_000_000)):
                return Reply(503, b"<html><body><h1>503 Service Unavailable</h1></body></html>")
        elif route.startswith("/ratelimit/"):
            if self.counters.take(route, _int_arg(query, "n", 1, 0, 1_000_000)):
                return Reply(429, b"<html><body><h1>429 Too Many Requests</h1></body></html>",
                             headers=(("Retry-After", "1"),))
        elif route == "/slow":
            time.sleep(_float_arg(query, "s", 1.0, 0.0, MAX_SLOW_SECONDS))
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
