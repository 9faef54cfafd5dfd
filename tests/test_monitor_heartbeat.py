"""Heartbeats and history samples, written by real extensions on a real Redis (no crawl)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
import redis
from scrapy.utils.test import get_crawler

from distscraper.frontier.client import Frontier
from distscraper.frontier.keys import FrontierKeys
from distscraper.monitor.activity import Activity
from distscraper.monitor.heartbeat import Heartbeat
from distscraper.sandbox.servers import free_port


def make_heartbeat(redis_url: str, prefix: str, node: str, **settings: Any) -> Heartbeat:
    """A Heartbeat on a real crawler whose frontier keys are set (what spider_opened gives it)."""
    crawler = get_crawler(settings_dict={
        "DUPEFILTER_CLASS": "distscraper.frontier.dupefilter.RedisDupeFilter",
        "REDIS_URL": redis_url, "NODE_ID": node, "HEARTBEAT_INTERVAL": 1.0, "HEARTBEAT_TTL": 4.0,
        **settings})
    hb = Heartbeat.from_crawler(crawler)
    hb.frontier = Frontier.of(crawler)
    hb.frontier.keys = FrontierKeys(prefix)
    return hb


def test_beat_writes_node_key_index_and_cleans_stale_entries(redis_server: Any, redis_client: redis.Redis,
                                                             prefix: str) -> None:
    keys = FrontierKeys(prefix)
    redis_client.zadd(keys.nodes, {"long-gone": int((time.time() - 60) * 1000)})
    hb = make_heartbeat(redis_server.url, prefix, "n1")
    hb.crawler.stats.set_value("response_received_count", 12)
    hb.crawler.stats.set_value("item_scraped_count", 11)
    hb.beat()
    beat = json.loads(redis_client.get(keys.node("n1")))
    assert beat["id"] == "n1" and beat["pages"] == 12 and beat["items"] == 11 and beat["inflight"] == 0
    assert {"host", "pid", "started", "pages_per_min", "last_error", "domains"} <= set(beat)
    assert 0 < redis_client.pttl(keys.node("n1")) <= 4000  # HEARTBEAT_TTL
    assert [m.decode() for m in redis_client.zrange(keys.nodes, 0, -1)] == ["n1"]
    hb.spider_closed(hb.crawler.spider, "finished")
    assert redis_client.get(keys.node("n1")) is None
    assert redis_client.zcard(keys.nodes) == 0


def test_one_history_sample_per_interval_however_many_nodes(redis_server: Any, redis_client: redis.Redis,
                                                            prefix: str) -> None:
    keys = FrontierKeys(prefix)
    redis_client.hset(keys.stats, mapping={"done": 5, "retries": 2, "dead": 1})
    redis_client.zadd(keys.queue("a.com"), {b"p1": 0, b"p2": 1})
    nodes = [make_heartbeat(redis_server.url, prefix, f"n{i}", HEARTBEAT_INTERVAL=5.0, HEARTBEAT_TTL=10.0)
             for i in range(3)]
    for hb in nodes:
        hb.beat()
    samples = [json.loads(s) for s in redis_client.lrange(keys.history, 0, -1)]
    assert len(samples) == 1
    assert {k: v for k, v in samples[0].items() if k != "t"} == {
        "done": 5, "queued": 2, "inflight": 0, "delayed": 0, "dead": 0, "errors": 3}
    assert redis_client.zcard(keys.nodes) == 3
    assert 0 < redis_client.pttl(keys.history + ":lock") <= 5000  # it lasts one interval
    redis_client.delete(keys.history + ":lock")  # as if the interval had passed
    for hb in nodes:
        hb.beat()
    assert redis_client.llen(keys.history) == 2


def test_history_is_trimmed(redis_server: Any, redis_client: redis.Redis, prefix: str) -> None:
    keys = FrontierKeys(prefix)
    redis_client.rpush(keys.history, *[b"{}"] * 800)
    make_heartbeat(redis_server.url, prefix, "n1").beat()
    assert redis_client.llen(keys.history) == 720


def test_redis_errors_are_logged_not_raised(prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    hb = make_heartbeat(f"redis://127.0.0.1:{free_port()}/0", prefix, "n1")
    with caplog.at_level(logging.WARNING):
        hb.beat()
        hb.beat()
        hb.spider_closed(hb.crawler.spider, "finished")
    assert hb.crawler.stats.get_value("monitor/heartbeat_errors") == 2
    assert sum("Heartbeat of node n1 not sent" in r.getMessage() for r in caplog.records) == 1


def test_ttl_must_exceed_interval(redis_server: Any, prefix: str) -> None:
    with pytest.raises(ValueError, match="HEARTBEAT_TTL"):
        make_heartbeat(redis_server.url, prefix, "n1", HEARTBEAT_INTERVAL=5.0, HEARTBEAT_TTL=5.0)


def test_activity_rates_and_pace() -> None:
    act = Activity()
    now = time.time()
    act.started = now - 120
    for i in range(30):
        act.count("a.com", now - 70 - i % 5)  # older than a minute: forgotten
    for i in range(45):
        act.count("a.com" if i % 3 else "b.com", now - 50 + i)
    assert act.pages_per_min(now) == 45.0
    assert act.domain_pace(now=now) == {"a.com": 30.0, "b.com": 15.0}
    young = Activity()
    young.started = now - 20
    for _ in range(10):
        young.count("a.com", now - 1)
    assert young.pages_per_min(now) == 30.0  # 10 pages in 20 s


def test_activity_keeps_the_last_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)  # as in a worker, where Scrapy lets every level reach the root
    act = Activity()
    act.capture_logs(True)
    try:
        logging.getLogger("some.where").info("fine")
        logging.getLogger("distscraper.frontier.retry").info("Retry %d/%d of %s", 1, 2, "http://x/")
        assert act.last_error is not None and "Retry 1/2 of http://x/" in act.last_error["message"]
        logging.getLogger("some.where").error("disk %s", "full")
    finally:
        act.capture_logs(False)
    logging.getLogger("some.where").error("not seen")
    assert act.errors == 2
    assert act.last_error["message"] == "ERROR: disk full"
