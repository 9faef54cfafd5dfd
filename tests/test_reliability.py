"""Faults in mid-crawl lose nothing: kill -9, SIGTERM and a Redis restart.

After each fault the crawl completes with every page stored exactly once, and
the pages fetched twice are at most the requests in flight when it happened.
"""

from __future__ import annotations

import random
import signal
import time

import pytest
from cluster import Cluster, fetched_twice
from helpers import stop_worker

from distscraper.sandbox.servers import RedisServer

# Slow enough that the faults land in mid-crawl, on a 2,000-page site.
PACED = {"CONCURRENT_REQUESTS_PER_DOMAIN": 3, "DOWNLOAD_DELAY": 0.004}


def done(cluster: Cluster) -> int:
    return cluster.snapshot().counters.get("done", 0)


@pytest.mark.slow
def test_kill_9_three_times_with_replacements(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=2000)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path, **PACED)
    cluster.start(3)
    cluster.seed(web.url("/"))
    rng = random.Random(7)
    in_flight_at_kills = 0
    for threshold in (250, 900, 1500):
        cluster.wait_for(lambda: done(cluster) >= threshold, 120, f"{threshold} pages done")
        victim = rng.choice(cluster.alive())
        in_flight_at_kills += cluster.snapshot().inflight
        stop_worker(victim, signal.SIGKILL, timeout=10)
        cluster.start(1)
    exit_codes = cluster.wait_done(300)
    assert exit_codes.count(-signal.SIGKILL) == 3 and exit_codes.count(0) == 3

    cluster.assert_complete(web)
    assert len(fetched_twice(web)) <= in_flight_at_kills
    assert cluster.snapshot().counters.get("reaped", 0) > 0


def test_sigterm_returns_leases_at_once(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=2000)
    # Leases far longer than the test: only the graceful return can bring them back in time.
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path,
                      FRONTIER_LEASE_TIME=600, **PACED)
    cluster.start(3)
    cluster.seed(web.url("/"))
    cluster.wait_for(lambda: done(cluster) >= 500, 120, "500 pages done")
    in_flight = cluster.snapshot().inflight
    victim = cluster.alive()[0]
    assert stop_worker(victim, signal.SIGTERM, timeout=40) == 0
    assert cluster.wait_done(300) == [0, 0, 0]

    cluster.assert_complete(web)
    assert len(fetched_twice(web)) <= in_flight
    assert cluster.snapshot().counters.get("reaped", 0) == 0


@pytest.mark.slow
def test_redis_restart_with_appendonly(mongo_server, prefix, site, tmp_path):
    web = site(pages=2000)
    with RedisServer(appendonly=True, data_dir=tmp_path / "redis") as server:
        # Leases outlast the outage, so no live worker's lease is reaped after it.
        cluster = Cluster(server.url, mongo_server.uri, prefix, tmp_path,
                          FRONTIER_LEASE_TIME=60, **PACED)
        cluster.start(3)
        cluster.seed(web.url("/"))
        cluster.wait_for(lambda: done(cluster) >= 600, 120, "600 pages done")
        in_flight = cluster.snapshot().inflight
        server.stop()
        time.sleep(5)  # workers keep running, buffering their changes
        assert len(cluster.alive()) == 3
        server.start()
        assert cluster.wait_done(300) == [0, 0, 0]

        cluster.assert_complete(web)
        assert len(fetched_twice(web)) <= in_flight
        logs = "".join(p.read_text() for p in tmp_path.glob("worker-*.log"))
        assert "unreachable" in logs and "reachable again" in logs
