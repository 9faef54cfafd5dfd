"""robots.txt for the whole cluster: Scrapy's RobotsTxtMiddleware, plus ``Crawl-delay``.

:class:`FrontierRobotsTxtMiddleware` replaces
``scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware`` (same
``ROBOTSTXT_OBEY`` switch, same parser, same ``Disallow`` handling). In
addition, when a worker parses a domain's robots.txt (Scrapy's
``robots_parsed`` signal), the ``Crawl-delay`` for our user agent is published
to the shared frontier with :meth:`Frontier.set_crawl_delay`, at most once per
domain per worker. The frontier then spaces *every* worker's requests to that
domain by at least that delay (capped at ``ROBOTSTXT_CRAWL_DELAY_MAX``).

A robots.txt without ``Crawl-delay`` publishes nothing (the domain keeps
``DOWNLOAD_DELAY``); robots.txt requests themselves bypass the frontier, as
they do in Scrapy, so each worker fetches each robots.txt once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware

from distscraper import defaults
from distscraper.frontier import codec
from distscraper.frontier.client import Frontier

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.robotstxt import RobotParser

logger = logging.getLogger(__name__)


class FrontierRobotsTxtMiddleware(RobotsTxtMiddleware):
    """Obeys robots.txt like Scrapy's middleware and shares its Crawl-delay cluster-wide."""

    def __init__(self, crawler: "Crawler") -> None:
        super().__init__(crawler)  # raises NotConfigured unless ROBOTSTXT_OBEY
        self.frontier = Frontier.of(crawler)
        self.max_delay: float = defaults.get(crawler.settings, "ROBOTSTXT_CRAWL_DELAY_MAX")
        self.user_agent: str | None = crawler.settings.get("ROBOTSTXT_USER_AGENT")
        self.default_user_agent: str = crawler.settings.get("USER_AGENT")
        self.published: dict[str, float] = {}
        if self.max_delay > 0:
            crawler.signals.connect(self.robots_parsed, signal=signals.robots_parsed)

    def user_agent_for(self, request: Request) -> str:
        """The user agent robots.txt rules are read for (Scrapy's own choice)."""
        if self.user_agent:
            return self.user_agent
        header = request.headers.get(b"User-Agent")
        if header:
            return header.decode("latin-1")
        return self.default_user_agent

    def robots_parsed(self, robotparser: "RobotParser", request: Request, **_: Any) -> None:
        """Publish the domain's Crawl-delay, once per domain per worker."""
        domain = codec.domain_of(request)
        if self.max_delay <= 0 or not domain or domain in self.published:
            return
        try:
            delay = robotparser.crawl_delay(self.user_agent_for(request))
        except (TypeError, ValueError) as exc:  # a parser that chokes on a bad value
            logger.warning("Unreadable Crawl-delay in robots.txt of %s: %s", domain, exc)
            delay = None
        if delay is None or not delay > 0:  # also rejects NaN
            return
        seconds = min(float(delay), self.max_delay)
        if seconds < delay:
            logger.warning("robots.txt of %s asks Crawl-delay %gs; capped at "
                           "ROBOTSTXT_CRAWL_DELAY_MAX=%gs", domain, delay, self.max_delay)
        self.published[domain] = seconds
        self.frontier.set_crawl_delay(domain, seconds)
        self.crawler.stats.inc_value("frontier/crawl_delays")
        logger.info("robots.txt of %s: Crawl-delay %gs, now applied by the whole cluster",
                    domain, seconds)
