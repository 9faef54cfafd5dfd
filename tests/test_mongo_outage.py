"""MongoDB goes down in mid-crawl: workers keep running, nothing is lost or stored twice.

Each test runs its own on-disk MongoDB (SecantusDB) so it can stop and restart
it; Redis and the web site are the session's. While MongoDB is down the
pipeline buffers items, and requests whose items are not stored are not
acknowledged. With a small ``MONGO_BUFFER_MAX`` crawling pauses instead.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from cluster import Cluster

from distscraper.sandbox.servers import MongoServer

# Slow enough that the outage lands in mid-crawl; quick recovery after it.
PACED = {"CONCURRENT_REQUESTS_PER_DOMAIN": 2, "DOWNLOAD_DELAY": 0.004,
         "MONGO_RETRY_MAX": 2, "MONGO_CONNECT_TIMEOUT": 2,
         # Leases outlast the outage; the holding worker renews them anyway.
         "FRONTIER_LEASE_TIME": 30}
OUTAGE_S = 12


def worker_logs(tmp_path: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("worker-*.log")))


def done(cluster: Cluster) -> int:
    return int(cluster.snapshot().counters.get("done", 0))


def crawl_through_outage(redis_url: str, prefix: str, web: Any, tmp_path: Path,
                         **settings: Any) -> tuple[str, int]:
    """Crawl ``web`` with 2 workers, stop MongoDB for OUTAGE_S seconds once 300 pages are
    stored, check the cluster during the outage. Return the workers' logs and the number
    of pages fetched in the second half of the outage."""
    with MongoServer(work_dir=tmp_path / "mongo") as mongo:  # data on disk: kept on restart
        cluster = Cluster(redis_url, mongo.uri, prefix, tmp_path, **PACED, **settings)
        cluster.start(2)
        cluster.seed(web.url("/"))
        cluster.wait_for(lambda: cluster.collection.count_documents({}) >= 300, 120,
                         "300 pages stored")
        mongo.stop()
        stopped, stopped_at = time.monotonic(), time.time()
        time.sleep(3)  # a write in flight at the stop has settled by now
        done_during = done(cluster)
        while time.monotonic() - stopped < OUTAGE_S:
            assert len(cluster.alive()) == 2, "a worker exited while MongoDB was down"
            time.sleep(0.5)
        # Nothing is acknowledged while its items cannot be stored.
        assert done(cluster) == done_during
        assert cluster.snapshot().inflight > 0
        late = [h for h in web.hits() if h["t"] >= stopped_at + OUTAGE_S / 2]
        mongo.start()
        assert cluster.wait_done(300) == [0, 0]

        cluster.assert_complete(web)  # every page stored exactly once, frontier empty
        logs = worker_logs(tmp_path)
        assert re.search(r"MongoDB at \S+ is unreachable", logs)
        assert re.search(r"MongoDB at \S+ accepts writes again after", logs)
        assert "Spider error" not in logs and "not stored" not in logs
        return logs, len(late)


@pytest.mark.slow
def test_mongo_outage_buffers_and_recovers(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=2000)
    logs, fetched_late = crawl_through_outage(redis_server.url, prefix, web, tmp_path)
    assert "crawling paused" not in logs  # the default buffer held the outage
    assert fetched_late > 0  # and crawling went on


@pytest.mark.slow
def test_mongo_outage_with_full_buffer_pauses_crawling(redis_server, mongo_server, prefix, site,
                                                       tmp_path):
    web = site(pages=2000)
    logs, fetched_late = crawl_through_outage(redis_server.url, prefix, web, tmp_path,
                                              MONGO_BUFFER_MAX=50)
    assert "(MONGO_BUFFER_MAX=50): crawling paused" in logs
    assert fetched_late == 0  # paused: no page fetched once both buffers were full
    assert "crawling resumed" in logs
    # Paused, not dropping: a worker held at most the buffer plus the requests in progress.
    peaks = [int(n) for n in re.findall(r"'mongo/buffer_max': (\d+)", logs)]
    assert len(peaks) == 2 and max(peaks) < 50 + 20
    assert "'item_dropped_count'" not in logs
