"""Politeness holds for the whole cluster, not per worker: DOWNLOAD_DELAY, robots.txt
Crawl-delay and the 429/503 back-off space the requests of 3 real workers to one domain,
while two domains are crawled side by side.

Real workers, Redis, MongoDB and HTTP. Two views of each rule:

* the frontier's guarantee, read from Redis while the workers run: every lease of a
  domain sets ``<prefix>:throttle`` ``<domain>|next`` to lease time + delay, so
  successive values are at least the delay apart;
* what the site sees (its hit log): the same spacing, give or take the time between a
  worker's lease and its request reaching the server (Scrapy's own randomized per-worker
  DOWNLOAD_DELAY, a first robots.txt fetch, a loaded machine).

Bounds only: a loaded machine spreads requests out, it cannot pack leases closer.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from cluster import Cluster
from scrapy import Request, signals
from scrapy.robotstxt import ProtegoRobotParser
from scrapy.utils.test import get_crawler

from distscraper.frontier.client import Frontier
from distscraper.frontier.robots import FrontierRobotsTxtMiddleware
from distscraper.spiders.site import SiteSpider

ROBOTS = "/robots.txt"


def page_times(web: Any) -> list[float]:
    """Start times of every request to *web* except robots.txt (fetched once per worker,
    outside the frontier, as Scrapy does)."""
    return sorted(h["t"] for h in web.hits() if h["path"] != ROBOTS)


def max_in_window(times: list[float], width: float) -> int:
    """The most requests that started within any window of *width* seconds."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def count_between(times: list[float], start: float, end: float) -> int:
    return sum(1 for t in times if start <= t < end)


def watch_throttle(cluster: Cluster, fields: list[str], timeout: float = 180) -> dict[str, list[int]]:
    """Poll ``<prefix>:throttle`` until every worker has exited: each field's successive values."""
    seen: dict[str, list[int]] = {f: [] for f in fields}
    deadline = time.monotonic() + timeout
    while cluster.alive() and time.monotonic() < deadline:
        for field, value in zip(fields, cluster.redis.hmget(cluster.keys.throttle, fields)):
            if value is not None and (not seen[field] or int(value) != seen[field][-1]):
                seen[field].append(int(value))
        time.sleep(0.01)
    return seen


def robots_middleware(redis_url: str, **settings: Any) -> FrontierRobotsTxtMiddleware:
    crawler = get_crawler(SiteSpider, {"DUPEFILTER_CLASS": "distscraper.frontier.dupefilter.RedisDupeFilter",
                                       "REDIS_URL": redis_url, "ROBOTSTXT_OBEY": True, **settings})
    return FrontierRobotsTxtMiddleware.from_crawler(crawler)


def parsed(mw: FrontierRobotsTxtMiddleware, robots: bytes, url: str) -> None:
    """Send Scrapy's robots_parsed signal, as the stock middleware does after a download."""
    mw.crawler.signals.send_catch_log(signal=signals.robots_parsed,
                                      robotparser=ProtegoRobotParser(robots, None), request=Request(url))


def test_crawl_delay_is_published_once_per_domain_and_capped(redis_server):
    mw = robots_middleware(redis_server.url, ROBOTSTXT_CRAWL_DELAY_MAX=30)
    outbox = Frontier.of(mw.crawler).outbox
    parsed(mw, b"User-agent: *\nCrawl-delay: 2.5\n", "http://Shop.Example:8080/a")
    parsed(mw, b"User-agent: *\nCrawl-delay: 9\n", "https://shop.example/b")  # same domain
    parsed(mw, b"User-agent: *\nCrawl-delay: 3600\n", "http://slow.example/")
    parsed(mw, b"User-agent: *\nDisallow: /private/\n", "http://plain.example/")
    parsed(mw, b"User-agent: other\nCrawl-delay: 5\n", "http://other.example/")  # not our agent
    assert outbox.crawl_delays == [("shop.example", 2500), ("slow.example", 30_000)]
    assert mw.crawler.stats.get_value("frontier/crawl_delays") == 2


def test_crawl_delay_can_be_ignored(redis_server):
    mw = robots_middleware(redis_server.url, ROBOTSTXT_CRAWL_DELAY_MAX=0)
    parsed(mw, b"User-agent: *\nCrawl-delay: 2\n", "http://a.example/")
    assert Frontier.of(mw.crawler).outbox.crawl_delays == []


def test_download_delay_is_per_domain_for_the_cluster_and_domains_go_side_by_side(
        redis_server, mongo_server, prefix, site, tmp_path):
    small = {"pages": 40, "categories": 2, "missing_links": 4}
    one = site(host="127.0.0.1", **small)
    two = site(host="127.0.0.2", port=one.port, seed=2, **small)  # a second domain
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path, DOWNLOAD_DELAY=0.2)
    cluster.seed(one.url("/"), two.url("/"))
    cluster.start(3)
    nexts = watch_throttle(cluster, ["127.0.0.1|next", "127.0.0.2|next"])
    assert cluster.wait_done(30) == [0, 0, 0]
    cluster.assert_complete(one)
    cluster.assert_complete(two)

    for web, lease_ends in zip((one, two), nexts.values()):
        times = page_times(web)
        # Leases 0.2 s apart whichever of the 3 workers took them, none unseen.
        assert min(gaps(lease_ends)) >= 200, gaps(lease_ends)
        assert len(lease_ends) >= len(times)
        # The site sees 5 requests a second (15 if each worker kept its own delay); a
        # request reaches it up to ~0.4 s after its lease, so a window may hold a few more.
        assert statistics.median(gaps(times)) >= 0.18, gaps(times)
        assert max_in_window(times, 1.0) <= 8, gaps(times)
        assert max_in_window(times, 3.0) <= 18, gaps(times)
    # Fairness: both domains are crawled at the same time, not one after the other.
    a, b = page_times(one), page_times(two)
    start, end = min(a[0], b[0]), max(a[-1], b[-1])
    first_quarter = start + (end - start) / 4
    assert count_between(a, start, first_quarter) >= len(a) / 8
    assert count_between(b, start, first_quarter) >= len(b) / 8
    overlap = min(a[-1], b[-1]) - max(a[0], b[0])
    assert overlap >= 0.75 * min(a[-1] - a[0], b[-1] - b[0])


def test_robots_crawl_delay_holds_across_workers(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=16, categories=2, missing_links=2, crawl_delay=0.5)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path, DOWNLOAD_DELAY=0)
    cluster.seed(web.url("/"))
    cluster.start(3)
    lease_ends = watch_throttle(cluster, ["127.0.0.1|next"])["127.0.0.1|next"]
    assert cluster.wait_done(30) == [0, 0, 0]
    cluster.assert_complete(web)

    assert cluster.redis.hget(cluster.keys.throttle, "127.0.0.1|crawl_delay") == b"500"
    # From the moment robots.txt was read, leases are 0.5 s apart cluster-wide ...
    assert min(gaps(lease_ends)) >= 500, gaps(lease_ends)
    # ... and so are the requests, including the one after the first page, which was
    # leased before anyone knew the Crawl-delay.
    times = page_times(web)
    assert len(times) >= 20
    assert min(gaps(times)) >= 0.4, gaps(times)
    assert statistics.median(gaps(times)) >= 0.48, gaps(times)
    # Each worker fetched robots.txt itself, and all three crawled.
    assert sum(1 for h in web.hits() if h["path"] == ROBOTS) == 3
    nodes = {d["node"] for d in cluster.collection.find({}, {"node": 1})}
    assert len(nodes) == 3


def test_429_slows_the_domain_down_for_the_cluster_then_it_recovers(
        redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=200, categories=2, missing_links=0)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path, DOWNLOAD_DELAY=0,
                      THROTTLE_BACKOFF_BASE=1.0, THROTTLE_RECOVER_AFTER=2.0, RETRY_JITTER=0)
    cluster.seed(web.url("/"))
    cluster.start(3)
    # Full speed first; then one URL that answers 429 once, queued before everything else.
    cluster.wait_for(lambda: len(page_times(web)) >= 30, 60, "30 pages at full speed")
    limited = "/ratelimit/a?n=1"
    cluster.seed(json.dumps({"url": web.url(limited), "priority": 100}))
    penalties = watch_throttle(cluster, ["127.0.0.1|penalty"])["127.0.0.1|penalty"]
    assert cluster.wait_done(30) == [0, 0, 0]
    cluster.assert_complete(web)
    assert web.url(limited) in cluster.stored()

    times = page_times(web)
    [t429] = [h["t"] for h in web.hits() if h["status"] == 429]
    before = count_between(times, t429 - 2.0, t429)
    # Requests leased before the slow-down reached Redis may still land just after the 429;
    # from then on the domain gets one request per second (penalty 1 s, for 2 s) for the
    # whole cluster, the 429 page's own retry included.
    slowed = count_between(times, t429 + 0.5, t429 + 2.5)
    assert slowed <= 4, (before, slowed, penalties)
    assert before > 3 * slowed, (before, slowed, penalties)
    # Recovery: the penalty halves every 2 s without a 429 (1000, 500, 250, ... ms, then
    # gone) and the pace picks up again while pages remain.
    assert penalties[0] == 1000, penalties
    assert penalties == sorted(penalties, reverse=True), penalties
    assert min(penalties) <= 125, penalties
    later = max_in_window([t for t in times if t > t429 + 6.0], 1.0)
    assert later > 2 * slowed, (later, slowed, penalties)
