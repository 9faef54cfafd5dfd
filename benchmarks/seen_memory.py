"""Bytes per URL of each seen-set layout, and the Bloom filter's false-positive rate.

``python -m benchmarks.seen_memory --urls 1000000`` starts its own Redis, then
for each variant inserts the fingerprints of N distinct URLs in batches and
reports ``used_memory`` growth / N:

* ``scrapy_redis``: scrapy-redis's layout, 40-character hex SHA1 in one SET (the anchor);
* ``set16``: 16-byte binary fingerprints in one SET (distscraper's former layout);
* ``exact``: :class:`RedisDupeFilter` (sharded ziplist HASHes), default capacity;
* ``bloom``: :class:`BloomDupeFilter` at capacity N, error 0.001; its
  false-positive rate is measured on N further URLs that were never added.

``run(urls)`` returns the results as a dict (benchmarks/run.py calls it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

from distscraper.frontier.bloom import BloomDupeFilter, false_positive_rate
from distscraper.frontier.dupefilter import RedisDupeFilter
from distscraper.sandbox.servers import RedisServer

BATCH = 1000


def url(i: int) -> bytes:
    return b"https://site-%d.example/catalog/item?id=%d" % (i % 997, i)


def batches(start: int, stop: int) -> Iterator[list[bytes]]:
    """URLs start..stop-1 as lists of at most BATCH URLs."""
    for lo in range(start, stop, BATCH):
        yield [url(i) for i in range(lo, min(lo + BATCH, stop))]


def fingerprints(urls: list[bytes]) -> list[bytes]:
    return [hashlib.sha1(u).digest()[:16] for u in urls]


def measure(server: redis.Redis, urls: int, insert: Callable[[list[bytes]], int]) -> dict[str, Any]:
    """Insert *urls* URLs through *insert* (returns how many were new) into an empty Redis."""
    server.flushall()
    server.slowlog_reset()  # the slow log keeps the arguments of slow scripts: not the seen-set's
    before = server.info("memory")["used_memory"]
    started = time.perf_counter()
    new = sum(insert(batch) for batch in batches(0, urls))
    seconds = time.perf_counter() - started
    server.slowlog_reset()
    used = server.info("memory")["used_memory"] - before
    return {"bytes_per_url": round(used / urls, 2), "used_memory": used, "new": new,
            "urls_per_s": round(urls / seconds)}


def run(urls: int = 1_000_000) -> dict[str, Any]:
    """Measure every variant on one fresh Redis; returns {variant: figures, ...}."""
    redis_server = RedisServer().start()
    try:
        server = redis.Redis.from_url(redis_server.url)
        results: dict[str, Any] = {"urls": urls, "redis": server.info("server")["redis_version"]}

        def hex_set(batch: list[bytes]) -> int:
            return int(server.sadd("bench:dupefilter", *(hashlib.sha1(u).hexdigest() for u in batch)))

        def binary_set(batch: list[bytes]) -> int:
            return int(server.sadd("bench:dupefilter", *fingerprints(batch)))

        exact = RedisDupeFilter(server, "bench:dupefilter")
        bloom = BloomDupeFilter(server, "bench:dupefilter", capacity=urls, error=0.001)
        results["scrapy_redis"] = measure(server, urls, hex_set)
        results["set16"] = measure(server, urls, binary_set)
        results["exact"] = measure(server, urls, lambda b: sum(exact.add_many(fingerprints(b))))
        results["exact"]["generations"] = int(exact.stored_layout()["gen"]) + 1
        results["bloom"] = measure(server, urls, lambda b: sum(bloom.add_many(fingerprints(b))))
        wrong = sum(sum(bloom.contains_many(fingerprints(b))) for b in batches(urls, 2 * urls))
        layout = bloom.layout()
        bits, hashes = int(layout["m"]), int(layout["k"])
        results["bloom"].update(
            false_positive_rate=round(wrong / urls, 6), false_positives=wrong,
            expected_rate=round(false_positive_rate(bits, hashes, urls), 6),
            bits=bits, hashes=hashes, keys=layout["keys"])
        server.flushall()
        server.close()
        return results
    finally:
        redis_server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000, help="URLs per variant")
    args = parser.parse_args()
    results = run(args.urls)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
