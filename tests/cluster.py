"""A test cluster: N real `scrapy crawl site` workers on one frontier, plus the checks
every fault test makes afterwards (each page stored once, nothing lost, frontier empty)."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pymongo
import redis
from helpers import scrapy_env, start_worker, stop_worker, wait_all

from distscraper.frontier.keys import FrontierKeys
from distscraper.monitor.figures import Figures, read_figures
from distscraper.sandbox.demo import redis_cli

#: Settings that make fault tests quick: short leases, fast close when done.
FAST = {
    "MAX_IDLE_TIME_BEFORE_CLOSE": 4,
    "DOWNLOAD_TIMEOUT": 5,
    "FRONTIER_LEASE_TIME": 8,
    "LOG_LEVEL": "INFO",
    "HEARTBEAT_INTERVAL": 1,
}


class Cluster:
    """Workers sharing the frontier ``prefix`` on the test session's servers."""

    def __init__(self, redis_url: str, mongo_uri: str, prefix: str, log_dir: Path,
                 **settings: Any) -> None:
        self.redis_url = redis_url
        self.mongo_uri = mongo_uri
        self.prefix = prefix
        self.log_dir = log_dir
        self.settings: dict[str, Any] = {**FAST, "FRONTIER_KEY_PREFIX": prefix,
                                         "MONGO_DATABASE": prefix, **settings}
        self.env = scrapy_env(redis_url, mongo_uri)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.keys = FrontierKeys(prefix)
        self.redis = redis.Redis.from_url(redis_url)
        self.collection = pymongo.MongoClient(mongo_uri)[prefix]["site"]

    def start(self, n: int = 1, **settings: Any) -> list[subprocess.Popen[bytes]]:
        new = [start_worker({**self.settings, **settings}, self.env,
                            self.log_dir / f"worker-{len(self.workers) + i}.log") for i in range(n)]
        self.workers += new
        return new

    def seed(self, *seeds: str) -> None:
        """Seed the way a user does: `redis-cli lpush <prefix>:start_urls ...`."""
        subprocess.run([redis_cli(), "-u", self.redis_url, "lpush", self.keys.start_urls, *seeds],
                       check=True, stdout=subprocess.DEVNULL)

    def snapshot(self) -> Figures:
        return read_figures(self.redis, self.keys)

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [w for w in self.workers if w.poll() is None]

    def wait_for(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.1)

    def wait_done(self, timeout: float = 240) -> list[int]:
        return wait_all(self.workers, timeout)

    def stop_all(self) -> None:
        for w in self.alive():
            stop_worker(w, timeout=30)

    def stored(self) -> Counter[str]:
        return Counter(d["url"] for d in self.collection.find({}, {"url": 1}))

    def assert_complete(self, site: Any) -> None:
        """Every reachable page is stored exactly once, none is missing, the frontier is empty."""
        expected = site.spec.expected_urls(site.base_url)
        stored = self.stored()
        missing = expected - set(stored)
        assert not missing, f"{len(missing)} pages missing, e.g. {sorted(missing)[:5]}"
        assert all(n == 1 for n in stored.values()), "a page is stored twice"
        snap = self.snapshot()
        assert (snap.queued, snap.inflight, snap.delayed, snap.seeds, snap.seeds_pending) == (0, 0, 0, 0, 0), snap


def fetched_twice(site: Any) -> list[str]:
    counts = Counter(h["path"] for h in site.hits() if h["path"] != "/robots.txt")
    return [path for path, n in counts.items() if n > 1]
