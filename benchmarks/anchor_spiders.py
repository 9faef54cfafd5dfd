"""The anchors' spiders: the `site` spider's parsing, without distscraper's frontier.

* ``bench_memory``: a plain ``scrapy.Spider`` started from ``-a start_url=...``,
  for Scrapy's own in-memory scheduler and dupefilter;
* ``bench_scrapy_redis``: a ``scrapy_redis.spiders.RedisSpider`` reading seeds
  from ``<name>:start_urls``, for plain scrapy-redis 0.9.1.

Both borrow the parsing methods of :class:`distscraper.spiders.site.SiteSpider`
unchanged, so every variant parses the same pages into the same items and
follows the same links. Run with ``-s SPIDER_MODULES=benchmarks.anchor_spiders``
and the anchor's SCHEDULER / DUPEFILTER_CLASS / middlewares (see throughput.py).
"""

from __future__ import annotations

import os
import socket
from types import SimpleNamespace
from typing import Any, AsyncIterator

import scrapy
from scrapy_redis.spiders import RedisSpider

from distscraper import defaults
from distscraper.spiders.links import LinkPolicy
from distscraper.spiders.site import SiteSpider


class _SiteParsing:
    """SiteSpider's parse/page_item/links/parse_html, with the state they read (no frontier)."""

    custom_settings = SiteSpider.custom_settings
    parse = SiteSpider.parse
    page_item = SiteSpider.page_item
    links = SiteSpider.links
    parse_html = SiteSpider.parse_html

    def download_failed(self, failure: Any) -> None:
        """The errback SiteSpider's requests carry: plain Scrapy only logs the failure."""
        self.logger.warning("Download failed: %s", failure.value)

    def setup_parsing(self, crawler: Any) -> None:
        settings = crawler.settings
        self.policy = LinkPolicy.from_lists(defaults.get(settings, "SITE_ALLOW"),
                                            defaults.get(settings, "SITE_DENY"),
                                            defaults.get(settings, "SITE_ALLOWED_DOMAINS"))
        self.follow_links = defaults.get(settings, "SITE_FOLLOW_LINKS")
        self.non_html = defaults.get(settings, "SITE_NON_HTML")
        # page_item() records the node; there is no frontier here.
        self.frontier = SimpleNamespace(node=f"{socket.gethostname()}-{os.getpid()}")


class MemorySiteSpider(_SiteParsing, scrapy.Spider):
    """Plain Scrapy: ``-a start_url=http://...``; no Redis at all."""

    name = "bench_memory"

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> "MemorySiteSpider":
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.setup_parsing(crawler)
        return spider

    def __init__(self, start_url: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_url] if start_url else []

    async def start(self) -> AsyncIterator[scrapy.Request]:
        """The seed, through the dupefilter like every other request (so ``/`` is fetched once)."""
        for url in self.start_urls:
            yield scrapy.Request(url, callback=self.parse)


class ScrapyRedisSiteSpider(_SiteParsing, RedisSpider):
    """Plain scrapy-redis: seeds (URL or JSON) from ``bench_scrapy_redis:start_urls``."""

    name = "bench_scrapy_redis"

    def setup_redis(self, crawler: Any = None) -> None:
        super().setup_redis(crawler)
        self.setup_parsing(crawler or self.crawler)
