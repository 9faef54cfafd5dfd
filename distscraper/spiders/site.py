"""The `site` spider: seeds from Redis, one item per fetched page, links within the seeds' domains."""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator

from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response, TextResponse
from scrapy_redis.spiders import RedisSpider
from twisted.python.failure import Failure

from distscraper import defaults
from distscraper.frontier.client import Frontier
from distscraper.frontier.retry import settle_failure
from distscraper.frontier.seeds import Seed, parse_seed
from distscraper.items import PageItem
from distscraper.spiders.links import LinkPolicy, host_of

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

ROOT_META = "root_domain"  # the seed's domain, carried by every request it leads to


def seed_request(seed: Seed, callback: Callable[..., Any] | None = None,
                 errback: Callable[..., Any] | None = None) -> Request:
    """The request a seed starts (the spider's and the producer's): meta carries the seed's domain."""
    meta = dict(seed.meta)
    meta.setdefault(ROOT_META, host_of(seed.url))
    return Request(seed.url, callback=callback, errback=errback, meta=meta,
                   dont_filter=seed.force, priority=seed.priority or 0)


class SiteSpider(RedisSpider):
    """Reads seeds from ``<prefix>:start_urls`` and crawls within their domains.

    Seeds are read by the frontier in the background (not only when idle), so
    new and urgent seeds start at once. Non-HTML responses are recorded without
    parsing (``SITE_NON_HTML=record``) or skipped (``skip``); neither crashes.
    """

    name = "site"
    # Every status becomes an item; retryable ones are retried before they get here.
    custom_settings = {"HTTPERROR_ALLOW_ALL": True}

    def setup_redis(self, crawler: "Crawler | None" = None) -> None:
        crawler = crawler or self.crawler
        settings = crawler.settings
        self.frontier = Frontier.of(crawler)
        self.policy = LinkPolicy.from_lists(defaults.get(settings, "SITE_ALLOW"),
                                            defaults.get(settings, "SITE_DENY"),
                                            defaults.get(settings, "SITE_ALLOWED_DOMAINS"))
        self.follow_links = defaults.get(settings, "SITE_FOLLOW_LINKS")
        self.non_html = defaults.get(settings, "SITE_NON_HTML")
        if self.non_html not in ("record", "skip"):
            raise ValueError(f"setting SITE_NON_HTML={self.non_html!r} must be 'record' or 'skip'")
        self.seed_max_bytes = defaults.get(settings, "SEED_MAX_BYTES")
        self.server = self.frontier.server
        self.frontier.set_seed_handler(self.make_request_from_data)
        crawler.signals.connect(self.spider_idle, signal=signals.spider_idle)

    async def start(self) -> AsyncIterator[Any]:
        """No start requests: seeds arrive through Redis."""
        return
        yield  # pragma: no cover

    def start_requests(self) -> Iterator[Request]:
        return iter(())

    def make_request_from_data(self, data: bytes) -> Iterator[Request]:
        """One request per seed; raises SeedError (with the reason) for a bad one."""
        yield seed_request(parse_seed(data, self.seed_max_bytes), self.parse, self.download_failed)

    def spider_idle(self) -> None:
        """Close only when MAX_IDLE_TIME_BEFORE_CLOSE is set and the whole cluster is done."""
        if self.frontier.should_close():
            return
        raise DontCloseSpider

    def download_failed(self, failure: Failure) -> None:
        """Errback: a failure no downloader middleware settled (a redirect limit, a
        decompression error) still ends the request's lease, so it never hangs."""
        request = getattr(failure, "request", None)
        if request is not None:
            settle_failure(self.crawler, request, failure.value)

    def parse(self, response: Response, **_: Any) -> Iterator[Any]:
        item = self.page_item(response)
        if not isinstance(response, TextResponse) or b"html" not in response.headers.get(b"Content-Type", b"html"):
            self.crawler.stats.inc_value("site/non_html")
            if self.non_html == "record":
                yield item
            return
        if not response.body:
            self.crawler.stats.inc_value("site/empty_body")
            yield item
            return
        links = self.links(response)
        item.update(self.parse_html(response))
        item["out_links"] = len(links)
        yield item
        if self.follow_links and 200 <= response.status < 300:
            root = response.meta.get(ROOT_META) or host_of(response.url)
            for url in links:
                if self.policy.follows(url, root):
                    yield Request(url, callback=self.parse, errback=self.download_failed,
                                  meta={ROOT_META: root})

    def page_item(self, response: Response) -> PageItem:
        request = response.request
        redirects = response.meta.get("redirect_urls") or []
        referer = request.headers.get(b"Referer") if request is not None else None
        return PageItem(
            url=response.url,
            requested_url=redirects[0] if redirects else (request.url if request else response.url),
            status=response.status,
            content_type=response.headers.get(b"Content-Type", b"").decode("latin-1"),
            content_hash=hashlib.sha1(response.body).hexdigest(),
            depth=response.meta.get("depth", 0),
            referer=referer.decode("latin-1") if referer else None,
            fetched_at=round(time.time(), 3),
            download_latency=round(response.meta.get("download_latency", 0.0), 4),
            node=self.frontier.node,
            out_links=0,
            text_length=0,
        )

    def links(self, response: TextResponse) -> list[str]:
        seen: dict[str, None] = {}
        for href in response.css("a::attr(href)").getall():
            url = self.policy.normalize(response.urljoin(href.strip()))
            if url:
                seen[url] = None
        return list(seen)

    def parse_html(self, response: TextResponse) -> dict[str, Any]:
        text = " ".join(t.strip() for t in response.xpath("//body//text()[not(ancestor::script) and not(ancestor::style)]").getall())
        if "\ufffd" in response.text:
            self.crawler.stats.inc_value("site/bad_encoding")
        return {
            "title": (response.css("title::text").get() or "").strip(),
            "description": response.css('meta[name="description"]::attr(content)').get(),
            "canonical": response.css('link[rel="canonical"]::attr(href)').get(),
            "headings": [h.strip() for h in response.css("h1::text, h2::text, h3::text").getall()],
            "text_length": len(" ".join(text.split())),
        }
