"""Page URLs listed by a sitemap, for seeding (``scrapy seed --sitemap URL``).

Guarantees: XML is parsed with defusedxml (no entity expansion, no external
entities or DTDs); gzip-compressed sitemaps are accepted; ``<sitemapindex>``
files are followed (each sitemap fetched at most once, at most
``max_sitemaps`` fetches); every download and decompressed body is capped at
:data:`MAX_BYTES` (the sitemaps.org limit). URLs come back in document order,
without duplicates.
"""

from __future__ import annotations

import gzip
import io
import urllib.request
from collections import deque

from defusedxml import ElementTree

MAX_BYTES = 50 * 1024 * 1024
USER_AGENT = "distscraper-seed (+sitemap)"


class SitemapError(ValueError):
    """A sitemap that cannot be fetched or parsed; the message says which and why."""


def urls_from_sitemap(source: str | bytes, *, timeout: float = 30.0, max_sitemaps: int = 1000) -> list[str]:
    """The ``<urlset><url><loc>`` URLs of *source*: a sitemap's URL (str) or its XML (bytes)."""
    urls: dict[str, None] = {}
    todo: deque[str | bytes] = deque([source])
    fetched: set[str] = set()
    while todo:
        item = todo.popleft()
        if isinstance(item, str):
            if item in fetched:
                continue
            if len(fetched) >= max_sitemaps:
                raise SitemapError(f"more than {max_sitemaps} sitemaps to fetch")
            fetched.add(item)
            data, where = fetch(item, timeout), item
        else:
            data, where = item, "sitemap XML"
        kind, locs = parse_sitemap(data, where)
        if kind == "sitemapindex":
            todo.extend(locs)
        else:
            urls.update(dict.fromkeys(locs))
    return list(urls)


def fetch(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - operator input
            data = response.read(MAX_BYTES + 1)
    except (OSError, ValueError) as exc:  # URLError/HTTPError are OSErrors
        raise SitemapError(f"cannot fetch sitemap {url}: {exc}") from None
    if len(data) > MAX_BYTES:
        raise SitemapError(f"sitemap {url} is larger than {MAX_BYTES} bytes")
    return data


def parse_sitemap(data: bytes, where: str = "sitemap") -> tuple[str, list[str]]:
    """``("urlset", page URLs)`` or ``("sitemapindex", sitemap URLs)``."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.GzipFile(fileobj=io.BytesIO(data)).read(MAX_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise SitemapError(f"{where}: bad gzip data: {exc}") from None
        if len(data) > MAX_BYTES:
            raise SitemapError(f"{where}: more than {MAX_BYTES} bytes uncompressed")
    try:
        root = ElementTree.fromstring(data)
    except Exception as exc:  # ParseError or a defusedxml refusal (entities, DTD)
        raise SitemapError(f"{where}: not a valid sitemap: {type(exc).__name__}: {exc}") from None
    kind = _local(root.tag)
    if kind not in ("urlset", "sitemapindex"):
        raise SitemapError(f"{where}: not a sitemap (root element <{kind}>)")
    entry = "url" if kind == "urlset" else "sitemap"
    locs = [(loc.text or "").strip()
            for element in root if _local(element.tag) == entry
            for loc in element if _local(loc.tag) == "loc"]
    return kind, [loc for loc in locs if loc]


def _local(tag: object) -> str:
    """An element's name without its XML namespace."""
    return str(tag).rsplit("}", 1)[-1]
