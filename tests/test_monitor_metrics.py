"""Prometheus metrics of a worker: the exposition text, served over real HTTP, read from a real Redis."""

from __future__ import annotations

import logging
import re
import urllib.error
import urllib.request
from typing import Any

import pytest
import redis
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from distscraper.frontier.client import Frontier
from distscraper.frontier.keys import FrontierKeys
from distscraper.monitor.metrics import Metrics, exposition
from distscraper.sandbox.servers import free_port

SAMPLE = re.compile(r'^([a-z_]+)\{node="([^"]*)",frontier="([^"]*)"\} (\S+)$')


def make_metrics(redis_url: str, prefix: str, port: int) -> Metrics:
    crawler = get_crawler(settings_dict={
        "DUPEFILTER_CLASS": "distscraper.frontier.dupefilter.RedisDupeFilter",
        "REDIS_URL": redis_url, "NODE_ID": "m1", "METRICS_PORT": port})
    Frontier.of(crawler).keys = FrontierKeys(prefix)  # what the scheduler's open() sets
    return Metrics.from_crawler(crawler)


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ .+$", line), line
            continue
        m = SAMPLE.match(line)
        assert m, f"not an exposition line: {line!r}"
        values[m.group(1)] = float(m.group(4))
    return values


def test_off_unless_a_port_is_set() -> None:
    crawler = get_crawler(settings_dict={"DUPEFILTER_CLASS": "distscraper.frontier.dupefilter.RedisDupeFilter"})
    with pytest.raises(NotConfigured):
        Metrics.from_crawler(crawler)


def test_exposition_format_escapes_labels() -> None:
    text = exposition([("x_total", "counter", "Things.", 3.0), ("y", "gauge", "Y.", 1234567.0),
                       ("z", "gauge", "Z.", 0.25)], {"node": 'a"b\\c\nd'})
    assert text.splitlines()[:3] == ["# HELP x_total Things.", "# TYPE x_total counter",
                                     'x_total{node="a\\"b\\\\c\\nd"} 3']
    assert 'y{node="a\\"b\\\\c\\nd"} 1234567\n' in text and text.endswith("} 0.25\n")


def test_worker_counters_and_cluster_gauges(redis_server: Any, redis_client: redis.Redis, prefix: str) -> None:
    keys = FrontierKeys(prefix)
    redis_client.zadd(keys.queue("a.com"), {b"p1": 0, b"p2": 1, b"p3": 2})
    redis_client.zadd(keys.inflight, {b"i1": 1})
    redis_client.zadd(keys.delayed, {b"d1": 1, b"d2": 2})
    redis_client.hset(keys.dead, "fp", "{}")
    port = free_port()
    ext = make_metrics(redis_server.url, prefix, port)
    ext.crawler.stats.set_value("response_received_count", 42)
    ext.crawler.stats.set_value("item_scraped_count", 40)
    ext.crawler.stats.set_value("retry/count", 3)
    ext.spider_opened(ext.crawler.spider)
    try:
        values = scrape(port)
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    finally:
        ext.spider_closed(ext.crawler.spider, "finished")
    assert values["distscraper_worker_pages_total"] == 42
    assert values["distscraper_worker_items_total"] == 40
    assert values["distscraper_worker_retries_total"] == 3
    assert values["distscraper_worker_inflight"] == 0
    assert values["distscraper_cluster_queued"] == 3
    assert values["distscraper_cluster_inflight"] == 1
    assert values["distscraper_cluster_delayed"] == 2
    assert values["distscraper_cluster_dead"] == 1
    assert values["distscraper_cluster_up"] == 1
    with pytest.raises(OSError):  # stopped with the spider
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_unreachable_redis_only_drops_cluster_gauges(prefix: str) -> None:
    port = free_port()
    ext = make_metrics(f"redis://127.0.0.1:{free_port()}/0", prefix, port)
    ext.spider_opened(ext.crawler.spider)
    try:
        values = scrape(port)
    finally:
        ext.spider_closed(ext.crawler.spider, "finished")
    assert values["distscraper_cluster_up"] == 0
    assert "distscraper_cluster_queued" not in values
    assert values["distscraper_worker_pages_total"] == 0


def test_busy_port_is_logged_not_fatal(redis_server: Any, prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    first = make_metrics(redis_server.url, prefix, port)
    second = make_metrics(redis_server.url, prefix, port)
    first.spider_opened(first.crawler.spider)
    try:
        with caplog.at_level(logging.ERROR):
            second.spider_opened(second.crawler.spider)
        assert second.server is None
        assert any("Metrics off: cannot listen" in r.getMessage() for r in caplog.records)
    finally:
        first.spider_closed(first.crawler.spider, "finished")
        second.spider_closed(second.crawler.spider, "finished")
