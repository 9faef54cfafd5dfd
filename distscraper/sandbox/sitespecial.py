"""The special pages of the sandbox site: robots.txt, sitemap, errors, files, traps.

Each renders as pure data from the spec and the path. Flaky, rate-limited and
slow pages render as their eventual 200 page: the server adds the failures and
the sleep. Served whether or not the home page links them (:data:`EXTRA_LINKS`).
"""

from __future__ import annotations

import html
import random
import struct
import zlib
from typing import TYPE_CHECKING, Callable

from distscraper.sandbox.sitegraph import DISALLOWED_PREFIX, graph_of
from distscraper.sandbox.sitehtml import HTML, WORDS, Reply, not_found, simple

if TYPE_CHECKING:
    from distscraper.sandbox.sitegen import SiteSpec

MAX_BIG_KB = 64 * 1024


def render_special(spec: SiteSpec, route: str, query: str, base_url: str) -> Reply:
    """Special pages with a path parameter; the eventual 200 page for flaky/ratelimit/slow."""
    parts = route.strip("/").split("/")
    head, arg = parts[0], ("/".join(parts[1:]) if len(parts) > 1 else "")
    if head == "private" and len(parts) > 1:
        return simple(200, "Private", "Members only: crawlers obeying robots.txt never see this.",
                      base_url, route)
    if head in ("flaky", "ratelimit") and len(parts) == 2 and arg:
        return simple(200, f"{head.capitalize()} {arg}", "Answered at last.", base_url, route)
    if route == "/slow":
        return simple(200, "Slow", "This page took its time.", base_url, route)
    if head == "fail" and len(parts) == 2 and arg:
        return simple(500, "Server error", "This page always fails.", base_url, route)
    if head == "status" and len(parts) == 2 and arg.isdigit() and 200 <= int(arg) <= 599:
        code = int(arg)
        if code in (204, 304):
            return Reply(code, b"")
        return simple(code, f"Status {code}", f"This page answers {code}.", base_url, route)
    if head == "loop" and arg in ("a", "b"):
        return Reply(302, b"", headers=(("Location", "/loop/" + ("b" if arg == "a" else "a")),))
    if head == "redirect" and len(parts) == 2 and arg.isdigit():
        return Reply(302, b"", headers=(("Location", f"/item/{int(arg)}"),))
    if head == "files" and len(parts) == 2 and arg.endswith(".pdf") and len(arg) > 4:
        return _pdf(arg[:-4])
    return not_found(route, base_url)


def big(kb: int) -> Reply:
    """An HTML page of exactly ``kb`` KiB (or its bare skeleton when that is larger)."""
    head = b"<!DOCTYPE html>\n<html><head><title>Big page</title></head><body><h1>Big page</h1>\n"
    tail = b"</body></html>\n"
    para = b"<p>" + " ".join(WORDS[:16]).encode() + b"</p>\n"
    room = kb * 1024 - len(head) - len(tail)
    filler = (para * (room // len(para) + 1))[:room] if room > 0 else b""
    return Reply(200, head + filler + tail)


def _robots(spec: SiteSpec, base_url: str) -> Reply:
    lines = ["User-agent: *", f"Disallow: {DISALLOWED_PREFIX}"]
    if spec.crawl_delay is not None:
        lines.append(f"Crawl-delay: {spec.crawl_delay:g}")
    if base_url:
        lines.append(f"Sitemap: {base_url}/sitemap.xml")
    return Reply(200, ("\n".join(lines) + "\n").encode(), "text/plain; charset=utf-8")


def _sitemap(spec: SiteSpec, base_url: str) -> Reply:
    graph = graph_of(spec)
    paths = ["/"] + [graph.listing_path(c, 1) for c in graph.items_in]
    paths += [f"/item/{i}" for i in range(1, spec.pages + 1)]
    urls = "".join(f"<url><loc>{html.escape(base_url + p)}</loc></url>\n" for p in paths)
    body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n"
            f"{urls}</urlset>\n")
    return Reply(200, body.encode(), "application/xml")


def _pdf(name: str) -> Reply:
    rng = random.Random(f"pdf|{name}")
    filler = " ".join(rng.choice(WORDS) for _ in range(200))
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

#: Pages without parameters, rendered uncached: route -> render(spec, base_url).
STATIC_ROUTES: dict[str, Callable[[SiteSpec, str], Reply]] = {
    "/robots.txt": _robots,
    "/sitemap.xml": _sitemap,
    "/image.png": lambda spec, base: Reply(200, _PNG, "image/png"),
    "/empty": lambda spec, base: Reply(200, b"", HTML),
    "/broken-encoding": lambda spec, base: Reply(
        200, b"<!DOCTYPE html>\n<html><head><title>Broken \xff\xfe encoding</title></head>"
             b"<body><h1>Broken \xc3\x28 bytes</h1><p>Invalid UTF-8: \x80\x81\xfe\xff</p>"
             b"</body></html>\n", HTML),
}
