"""End to end: 3 real workers crawl a generated 2,000-page site through one Redis frontier."""

from __future__ import annotations

from collections import Counter

from cluster import Cluster, fetched_twice


def test_three_workers_store_every_page_once(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=2000)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path)
    cluster.start(3)
    cluster.seed(web.url("/"))
    assert cluster.wait_done(300) == [0, 0, 0]

    cluster.assert_complete(web)
    assert len(cluster.stored()) >= 2000
    assert fetched_twice(web) == []
    # One site, one domain: its cluster-wide slots are shared out, so every worker fetches.
    per_node = Counter(d["node"] for d in cluster.collection.find({}, {"node": 1}))
    assert len(per_node) == 3 and min(per_node.values()) >= 100, per_node
    # Closing workers never deletes the shared seen-set.
    assert cluster.snapshot().seen >= 2000
    # Scrapy 2.19 and scrapy-redis 0.9.1 log no deprecation warnings.
    logs = "".join(p.read_text() for p in tmp_path.glob("worker-*.log"))
    assert "Deprecat" not in logs and "String request is deprecated" not in logs


def test_json_seed_and_plain_seed_are_deduplicated(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=60, categories=3)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path)
    cluster.seed(web.url("/"), '{"url": "%s", "meta": {"source": "test"}}' % web.url("/cat/1/"))
    cluster.start(1)
    assert cluster.wait_done(120) == [0]
    cluster.assert_complete(web)
    # The start page is fetched once even though links lead back to it.
    assert fetched_twice(web) == []


def test_forced_seed_refetches(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=30, categories=2)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path)
    cluster.seed(web.url("/"))
    cluster.start(1)
    assert cluster.wait_done(120) == [0]
    cluster.seed('{"url": "%s", "force": true}' % web.url("/"), web.url("/"))
    cluster.start(1)
    assert cluster.wait_done(120) == [0, 0]
    homes = [h for h in web.hits() if h["path"] == "/"]
    assert len(homes) == 2  # once at first, once forced; the plain re-seed was filtered


def test_allow_deny_and_depth_limit(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=100, categories=4, per_page=5)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path,
                      SITE_DENY=["/cat/2/"], SITE_ALLOW=["/cat/", "/$"], DEPTH_LIMIT=2)
    cluster.seed(web.url("/"))
    cluster.start(1)
    assert cluster.wait_done(120) == [0]
    paths = {h["path"] for h in web.hits()} - {"/robots.txt"}
    assert "/" in paths and "/cat/1/" in paths
    assert not any(p.startswith("/cat/2/") for p in paths)  # denied
    assert not any(p.startswith("/item/") for p in paths)  # not allowed
    assert "/cat/1/page/2" in paths and "/cat/1/page/3" not in paths  # depth 2 is the limit
    assert all(d["depth"] <= 2 for d in cluster.collection.find({}, {"depth": 1}))
