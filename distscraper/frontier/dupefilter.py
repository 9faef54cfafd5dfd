"""Seen-sets shared by every worker, built on scrapy-redis's RFPDupeFilter.

:class:`RedisDupeFilter` stores 16-byte binary fingerprints in one Redis SET
(scrapy-redis stores 40-character hex strings). The check-and-add runs inside
the frontier's Lua script, so one round trip filters all links of a page, and
two workers can never both see a URL as new. Closing a worker never deletes the
set: only an explicit flush does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis
from scrapy import Request
from scrapy.utils.request import fingerprint
from scrapy_redis.dupefilter import RFPDupeFilter

from distscraper import defaults
from distscraper.frontier.connection import redis_from_settings
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.store import lua

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

FINGERPRINT_BYTES = 16


class RedisDupeFilter(RFPDupeFilter):
    """Exact seen-set; optional expiry (DUPEFILTER_TTL) for recrawls."""

    logger = logger

    def __init__(self, server: redis.Redis, key: str, debug: bool = False, *,
                 crawler: "Crawler | None" = None, ttl: int = 0) -> None:
        super().__init__(server, key, debug)
        self.crawler = crawler  # its request_fingerprinter exists only once the crawl starts
        self.ttl = ttl

    @classmethod
    def from_crawler(cls, crawler: "Crawler") -> "RedisDupeFilter":
        settings = crawler.settings
        keys = FrontierKeys.for_spider(crawler.spidercls.name, defaults.get(settings, "FRONTIER_KEY_PREFIX"))
        return cls(redis_from_settings(settings), keys.dupefilter, settings.getbool("DUPEFILTER_DEBUG"),
                   crawler=crawler, ttl=defaults.get(settings, "DUPEFILTER_TTL"))

    def fingerprint(self, request: Request) -> bytes:
        """16 bytes of Scrapy's request fingerprint (canonical URL, method, body)."""
        if self.crawler is not None:
            return self.crawler.request_fingerprinter.fingerprint(request)[:FINGERPRINT_BYTES]
        return fingerprint(request)[:FINGERPRINT_BYTES]

    def request_fingerprint(self, request: Request) -> str:
        return self.fingerprint(request).hex()

    def lua_prelude(self) -> str:
        """Lua defining ``seen_add(fp)`` for the frontier's exchange script."""
        return f"local DUPEFILTER_TTL = {int(self.ttl)}\n" + lua("seen_set.lua")

    def request_seen(self, request: Request) -> bool:
        """Standalone check-and-add (the frontier does this in bulk inside its script)."""
        return self.server.sadd(self.key, self.fingerprint(request)) == 0

    def close(self, reason: str = "") -> None:
        """Keep the shared seen-set: other workers still use it."""
