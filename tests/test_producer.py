"""The Python producer API (distscraper.producer) and the sitemap reader, on a real Redis."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.utils.request import fingerprint

from distscraper.frontier import codec
from distscraper.frontier.keys import FrontierKeys
from distscraper.producer import Producer, QueueFullTimeout, urls_from_sitemap
from distscraper.sandbox.site import SiteServer
from distscraper.sitemaps import SitemapError

TWO32 = 2**32


@pytest.fixture
def producer(redis_server: Any, prefix: str) -> Iterator[Producer]:
    with Producer(redis_server.url, settings={"FRONTIER_KEY_PREFIX": prefix}) as p:
        yield p


def queue(client: redis.Redis, prefix: str, domain: str) -> list[tuple[dict[str, Any], float]]:
    """A domain queue as (decoded payload, score), front first."""
    rows = client.zrange(FrontierKeys(prefix).queue(domain), 0, -1, withscores=True)
    return [(codec.loads(payload), score) for payload, score in rows]


def band(score: float) -> int:
    return int(score // TWO32)


def was_seen(producer: Producer, fp: bytes) -> bool:
    """Whether the workers' seen-set holds *fp* (through its own Lua, whatever its layout).

    Uses seen_add, which adds nothing when the fingerprint is already there.
    """
    script = producer.server.register_script(producer.dupefilter.lua_prelude() + "\nreturn seen_add(ARGV[2])")
    return int(script(args=[producer.keys.prefix + ":", fp])) == 0


def test_delay_and_apply_async_put_requests_in_their_priority_band(
        producer: Producer, redis_client: redis.Redis, prefix: str) -> None:
    keys = FrontierKeys(prefix)
    assert producer.delay("http://shop.example/").as_dict() == {
        "added": 1, "skipped": 0, "rejected": 0, "rejections": []}
    result = producer.apply_async("http://shop.example/urgent", priority=9, meta={"campaign": "x"})
    assert (result.added, result.skipped, result.rejected) == (1, 0, 0)

    (urgent, urgent_score), (plain, plain_score) = queue(redis_client, prefix, "shop.example")
    assert urgent["u"] == "http://shop.example/urgent" and band(urgent_score) == -9
    assert urgent["m"] == {"campaign": "x", "root_domain": "shop.example"}
    assert urgent["cb"] == "parse"  # built by the spider's own make_request_from_data
    assert plain["u"] == "http://shop.example/" and band(plain_score) == 0
    # fingerprinted like the workers: Scrapy's fingerprint, first 16 bytes, in the seen-set
    fp = fingerprint(Request("http://shop.example/"))[:16]
    assert plain["f"] == fp.hex() and was_seen(producer, fp)
    # the domain is scheduled, as a worker's push would do
    assert (redis_client.zscore(keys.ready, "shop.example") is not None
            or redis_client.zscore(keys.wait, "shop.example") is not None)
    assert int(redis_client.hget(keys.stats, "enqueued")) == 2


def test_same_url_twice_is_skipped_unless_forced(producer: Producer, redis_client: redis.Redis,
                                                  prefix: str) -> None:
    assert producer.delay("http://a.example/").added == 1
    assert producer.delay("http://a.example/").skipped == 1
    result = producer.push_many(["http://a.example/", "http://a.example/2", "http://a.example/2"])
    assert (result.added, result.skipped) == (1, 2)
    assert producer.apply_async("http://a.example/", force=True).added == 1
    forced = [row for row, _ in queue(redis_client, prefix, "a.example") if row.get("df")]
    assert [row["u"] for row in forced] == ["http://a.example/"]  # fetched again, dont_filter


def test_rejected_seeds_are_counted_with_reasons_and_not_pushed(
        producer: Producer, redis_client: redis.Redis, prefix: str) -> None:
    result = producer.push_many([
        "ftp://files.example/x", "   ", "notaurl", '{"url": 1}', '{"url": "http://b.example/"',
        {"url": "http://b.example/", "priority": "high"}, b"\xff\xfe", "http://ok.example/",
    ])
    assert (result.added, result.skipped, result.rejected) == (1, 0, 7)
    reasons = [reason for _, reason in result.rejections]
    for expected in ("scheme 'ftp' is not http or https", "empty URL", "no scheme",
                     "'url' must be a string", "malformed JSON", "'priority' must be an integer",
                     "not UTF-8"):
        assert any(expected in r for r in reasons), (expected, reasons)
    assert result.rejections[0][0] == "ftp://files.example/x"
    assert int(redis_client.hget(FrontierKeys(prefix).stats, "enqueued")) == 1
    assert [k for k in redis_client.scan_iter(f"{prefix}:requests:*")] == [
        f"{prefix}:requests:ok.example".encode()]


def test_priority_rules_apply_like_in_the_workers(redis_server: Any, redis_client: redis.Redis,
                                                   prefix: str) -> None:
    rules = [["/news/", 7]]
    with Producer(redis_server.url, settings={"FRONTIER_KEY_PREFIX": prefix,
                                              "FRONTIER_PRIORITY_RULES": rules}) as p:
        p.push_many(["http://n.example/news/1", "http://n.example/other"])
        p.apply_async("http://n.example/news/2", priority=2)  # an explicit priority wins
    bands = {row["u"]: band(score) for row, score in queue(redis_client, prefix, "n.example")}
    assert bands == {"http://n.example/news/1": -7, "http://n.example/other": 0,
                     "http://n.example/news/2": -2}


def test_max_queue_pushes_only_the_room_left_then_times_out(producer: Producer,
                                                           redis_client: redis.Redis,
                                                           prefix: str) -> None:
    urls = [f"http://q.example/{i}" for i in range(5)]
    with pytest.raises(QueueFullTimeout) as info:
        producer.push_many(urls, max_queue=3, timeout=1.0)
    assert info.value.result.added == 3
    assert len(queue(redis_client, prefix, "q.example")) == 3
    redis_client.delete(FrontierKeys(prefix).queue("q.example"))  # a worker drained it
    result = producer.push_many(urls, max_queue=3, timeout=5.0)
    assert (result.added, result.skipped) == (2, 3)
    with pytest.raises(ValueError):
        producer.push_many(urls, max_queue=0)


def test_unreachable_redis_raises_connection_error_with_masked_url(prefix: str) -> None:
    url = "redis://:s3cret@127.0.0.1:1/0"
    with Producer(url, settings={"FRONTIER_KEY_PREFIX": prefix}) as p:
        with pytest.raises(ConnectionError) as info:
            p.delay("http://x.example/")
    assert "s3cret" not in str(info.value) and "redis://:***@127.0.0.1:1/0" in str(info.value)


def test_urls_from_sitemap_reads_urlsets_indexes_and_gzip(site: Callable[..., SiteServer]) -> None:
    server = site(pages=30, categories=3)
    urls = urls_from_sitemap(server.url("/sitemap.xml"))
    assert urls[0] == server.url("/") and server.url("/item/30") in urls
    assert len(urls) == 1 + 3 + 30 and len(set(urls)) == len(urls)
    index = ('<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
             f"<sitemap><loc>{server.url('/sitemap.xml')}</loc></sitemap>"
             f"<sitemap><loc>{server.url('/sitemap.xml')}</loc></sitemap></sitemapindex>").encode()
    assert urls_from_sitemap(index) == urls
    assert urls_from_sitemap(gzip.compress(index)) == urls
    assert server.hits() and all(h["path"] == "/sitemap.xml" for h in server.hits())
    assert len(server.hits()) == 3  # once directly, once per index above (not twice per index)


def test_urls_from_sitemap_refuses_bad_documents() -> None:
    bomb = (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
            b"<urlset><url><loc>&b;</loc></url></urlset>")
    for data, reason in [(b"<urlset><url>", "not a valid sitemap"), (bomb, "not a valid sitemap"),
                         (b"<html><body/></html>", "root element <html>"),
                         (json.dumps({"a": 1}).encode(), "not a valid sitemap")]:
        with pytest.raises(SitemapError, match=reason):
            urls_from_sitemap(data)
    with pytest.raises(SitemapError, match="cannot fetch sitemap"):
        urls_from_sitemap("http://127.0.0.1:1/sitemap.xml", timeout=2)
