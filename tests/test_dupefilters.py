"""The seen-sets (exact sharded HASHes, Bloom filter) on a real Redis.

Their Lua runs the way workers run it: prepended to the frontier's exchange
script (``FrontierStore.exchange``), or in the filters' own batch wrappers.
"""

from __future__ import annotations

import hashlib
import random
import struct
import threading
from typing import Any

import pytest
import redis
from cluster import Cluster, fetched_twice
from scrapy import Request

from distscraper.frontier.bloom import BloomDupeFilter
from distscraper.frontier.dupefilter import RedisDupeFilter
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.store import ExchangeParams, FrontierStore, Outbox


def fps(start: int, stop: int, tag: str = "u") -> list[bytes]:
    """Distinct 16-byte fingerprints, like the workers' (a hash of a URL)."""
    return [hashlib.sha1(f"https://{tag}.example/{i}".encode()).digest()[:16] for i in range(start, stop)]


def make(kind: str, client: redis.Redis, prefix: str, **kwargs: Any) -> RedisDupeFilter:
    key = FrontierKeys(prefix).dupefilter
    if kind == "bloom":
        return BloomDupeFilter(client, key, capacity=kwargs.pop("capacity", 20_000), **kwargs)
    return RedisDupeFilter(client, key, capacity=kwargs.pop("capacity", 1000), **kwargs)


def push_all(store: FrontierStore, fingerprints: list[bytes], force: bool = False) -> tuple[int, int]:
    box = Outbox()
    for fp in fingerprints:
        payload = b'{"u": "%s", "df": %s}' % (fp.hex().encode(), b"true" if force else b"false")
        box.pushes.append((fp, "d.example", 0, payload, force))
    result = store.exchange(box, ExchangeParams(node="test", lease_ms=60_000))
    return result.new, result.duplicates


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_exchange_filters_new_and_seen(kind: str, redis_client: redis.Redis, prefix: str) -> None:
    df = make(kind, redis_client, prefix)
    keys = FrontierKeys(prefix)
    store = FrontierStore(redis_client, keys, df.lua_prelude())
    first, later = fps(0, 300), fps(300, 400)
    assert push_all(store, first + first[:10]) == (300, 10)  # repeats within one round trip too
    assert push_all(store, first[50:100] + later) == (100, 50)
    assert push_all(store, first[:5], force=True) == (5, 0)  # forced: queued, not counted as seen again
    assert redis_client.zcard(keys.queue("d.example")) == 405
    assert int(redis_client.hget(keys.stats, "seen")) == 400
    assert df.contains_many(first + later) == [True] * 400
    assert df.stored_layout()["kind"] == kind
    assert redis_client.type(keys.dupefilter) == b"hash"


def test_exact_grows_by_generations_of_small_ziplist_buckets(redis_client: redis.Redis,
                                                           prefix: str) -> None:
    df = make("exact", redis_client, prefix, capacity=1000)  # generation 0: 16 buckets x 64
    data = fps(0, 6000)
    assert df.add_many(data) == [True] * 6000
    layout = df.stored_layout()
    assert (layout["bits0"], layout["gen"]) == ("4", "2")  # 1024 + 2048 + 2928 of 4096
    assert df.add_many(data) == [False] * 6000
    assert df.contains_many(fps(0, 1000, tag="other")) == [False] * 1000
    buckets = [k for k in redis_client.scan_iter(f"{prefix}:dupefilter:*", count=1000)]
    assert len(buckets) == 16 + 32 + 64
    for key in buckets:
        assert redis_client.object("encoding", key) in (b"ziplist", b"listpack")  # Redis 6 / 7
        assert redis_client.hlen(key) < 128
    assert sum(redis_client.hlen(k) for k in buckets) == 6000


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_two_clients_interleaving_add_each_url_once(kind: str, redis_server: Any, prefix: str) -> None:
    data = fps(0, 4000)
    results: dict[bytes, list[bool]] = {fp: [] for fp in data}
    lock = threading.Lock()

    def worker(seed: int) -> None:
        client = redis.Redis.from_url(redis_server.url)
        df = make(kind, client, prefix, capacity=200_000 if kind == "bloom" else 1000)
        order = data[:]
        random.Random(seed).shuffle(order)
        for i in range(0, len(order), 50):
            batch = order[i:i + 50]
            flags = df.add_many(batch)
            with lock:
                for fp, new in zip(batch, flags):
                    results[fp].append(new)
        client.close()

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(len(flags) == 2 for flags in results.values())
    assert all(sum(flags) == 1 for flags in results.values()), "a URL was new for both clients"


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_ttl_expires_every_key_of_the_seen_set_together(kind: str, redis_client: redis.Redis,
                                                        prefix: str) -> None:
    df = make(kind, redis_client, prefix, ttl=300)
    df.add_many(fps(0, 2000))
    meta_ttl = redis_client.pttl(f"{prefix}:dupefilter")
    assert 290_000 < meta_ttl <= 300_000
    parts = list(redis_client.scan_iter(f"{prefix}:dupefilter:*", count=1000))
    assert parts
    for key in parts:
        assert 0 < redis_client.pttl(key) <= meta_ttl + 2, key
    # gone together: a new seen-set starts empty
    redis_client.delete(f"{prefix}:dupefilter", *parts)
    assert df.add_many(fps(0, 10)) == [True] * 10


def test_without_ttl_nothing_expires(redis_client: redis.Redis, prefix: str) -> None:
    make("exact", redis_client, prefix).add_many(fps(0, 100))
    assert {redis_client.ttl(k) for k in redis_client.scan_iter(f"{prefix}:dupefilter*")} == {-1}


def test_stored_layout_wins_over_other_settings(redis_client: redis.Redis, prefix: str) -> None:
    first = make("exact", redis_client, prefix, capacity=1000)
    first.add_many(fps(0, 3000))
    other = make("exact", redis_client, prefix, capacity=50_000_000)  # another worker's settings
    assert other.add_many(fps(0, 3000)) == [False] * 3000
    bloom = make("bloom", redis_client, prefix)  # DUPEFILTER_CLASS switched on a running crawl
    assert bloom.add_many(fps(2990, 3010)) == [False] * 10 + [True] * 10
    assert not list(redis_client.scan_iter(f"{prefix}:dupefilter:bloom:*"))
    assert first.stored_layout()["kind"] == "exact"


def test_an_old_style_set_keeps_working(redis_client: redis.Redis, prefix: str) -> None:
    key = FrontierKeys(prefix).dupefilter
    old = fps(0, 10)
    redis_client.sadd(key, *old)
    df = make("exact", redis_client, prefix)
    assert df.add_many(old[:3] + fps(10, 12)) == [False] * 3 + [True] * 2
    assert redis_client.scard(key) == 12


def test_request_seen_uses_scrapy_fingerprints(redis_client: redis.Redis, prefix: str) -> None:
    df = make("exact", redis_client, prefix)
    assert not df.request_seen(Request("http://a.example/?b=2&a=1"))
    assert df.request_seen(Request("http://a.example/?a=1&b=2"))  # canonical URL
    assert not df.request_seen(Request("http://a.example/?a=1&b=2", method="POST"))


def test_bloom_false_positive_rate_at_capacity(redis_client: redis.Redis, prefix: str) -> None:
    df = make("bloom", redis_client, prefix, capacity=200_000, error=0.001)
    added = 0
    for i in range(0, 200_000, 2000):
        added += sum(df.add_many(fps(i, i + 2000)))
    assert added >= 200_000 - 100  # a new URL is rarely taken for a seen one
    wrong = 0
    for i in range(0, 200_000, 5000):
        wrong += sum(df.contains_many(fps(i, i + 5000, tag="fresh")))
    assert wrong / 200_000 <= 0.0015
    assert df.contains_many(fps(0, 2000)) == [True] * 2000  # never a false negative
    memory = sum(redis_client.memory_usage(k, samples=0)
                 for k in redis_client.scan_iter(f"{prefix}:dupefilter:bloom:*"))
    assert memory / 200_000 <= 2.0


class TinyKeyBloom(BloomDupeFilter):
    KEY_BITS = 2**13  # 1 KiB keys


def test_bloom_splits_over_keys_of_at_most_key_bits(redis_client: redis.Redis, prefix: str) -> None:
    df = TinyKeyBloom(redis_client, FrontierKeys(prefix).dupefilter, capacity=10_000)
    layout = df.layout()
    assert layout["keys"] > 1 and layout["key_bits"] <= 2**13
    data = fps(0, 10_000)
    assert sum(df.add_many(data)) >= 9990
    assert df.contains_many(data) == [True] * 10_000
    names = [f"{prefix}:dupefilter:bloom:{i}" for i in range(int(layout["keys"]))]
    assert {redis_client.strlen(n) for n in names} == {int(layout["key_bits"]) // 8}
    assert all(redis_client.bitcount(n) > 0 for n in names)  # every key holds bits
    assert not redis_client.exists(f"{prefix}:dupefilter:bloom:{layout['keys']}")
    wrong = sum(df.contains_many(fps(0, 10_000, tag="fresh")))
    assert wrong <= 30


def test_bloom_bits_are_exactly_where_the_double_hashing_puts_them(redis_client: redis.Redis,
                                                                   prefix: str) -> None:
    df = make("bloom", redis_client, prefix, capacity=2_000_000)  # 48-bit h1 + j*h2, in doubles
    layout = df.layout()
    keys, key_bits, k = int(layout["keys"]), int(layout["key_bits"]), int(layout["k"])
    data = fps(0, 3)
    df.add_many(data)
    expected: set[tuple[int, int]] = set()
    for fp in data:
        a, b, c, d, e = struct.unpack(">IHIHI", fp)
        h1, h2 = a << 16 | b, c << 16 | d
        expected |= {(e % keys, (h1 + j * h2) % key_bits) for j in range(k)}
    names = [f"{prefix}:dupefilter:bloom:{i}" for i in range(keys)]
    assert sum(redis_client.bitcount(n) for n in names) == len(expected)
    assert all(redis_client.getbit(names[key], offset) == 1 for key, offset in expected)


def test_bloom_layout_math() -> None:
    df = BloomDupeFilter(None, "site:dupefilter", capacity=100_000_000, error=0.001)
    layout = df.layout()
    assert layout["k"] == 10 and layout["m"] >= 1_437_758_757  # -n ln p / (ln 2)^2
    assert layout["key_bits"] <= 2**32
    assert layout["keys"] * (layout["key_bits"] // 8 + 16) / 100_000_000 <= 2.0  # bytes per URL
    with pytest.raises(ValueError):
        BloomDupeFilter(None, "site:dupefilter", capacity=1000, error=1.5)


def test_crawl_with_bloom_dupefilter_stores_every_page_once(redis_server: Any, mongo_server: Any,
                                                            prefix: str, site: Any, tmp_path: Any) -> None:
    web = site(pages=300)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path,
                      DUPEFILTER_CLASS="distscraper.frontier.bloom.BloomDupeFilter",
                      DUPEFILTER_BLOOM_CAPACITY=100_000)
    cluster.start(2)
    cluster.seed(web.url("/"))
    assert cluster.wait_done(180) == [0, 0]
    cluster.assert_complete(web)
    assert fetched_twice(web) == []
    assert cluster.redis.hget(cluster.keys.dupefilter, "kind") == b"bloom"
    snap = cluster.snapshot()
    assert snap.seen == snap.counters["seen"] >= len(web.spec.expected_urls(web.base_url))
