"""Retries held in Redis: back-off that grows, Retry-After, dead letters, unreachable hosts.

Real workers, Redis, MongoDB and HTTP. Timing checks are lower bounds only: a
loaded machine makes gaps longer, never shorter.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from cluster import Cluster
from helpers import fetch_counts

# Only the seeded URLs are fetched; retries come quickly and without jitter.
ONLY_SEEDS = {"SITE_FOLLOW_LINKS": False, "RETRY_JITTER": 0}


def attempt_times(web: Any, path: str) -> list[float]:
    return sorted(h["t"] for h in web.hits() if h["path"] == path)


def dead_records(cluster: Cluster) -> list[dict[str, Any]]:
    return [json.loads(v) for v in cluster.redis.hgetall(cluster.keys.key("dead")).values()]


def worker_logs(tmp_path: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("worker-*.log")))


def test_flaky_page_is_retried_with_growing_gaps(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=10, categories=1)
    # No domain slow-down after the 503s, so the gaps are the retry back-off alone.
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path, **ONLY_SEEDS,
                      RETRY_BACKOFF_BASE=0.5, THROTTLE_BACKOFF_BASE=0)
    cluster.seed(web.url("/flaky/a?fails=2"))
    cluster.start(1)
    assert cluster.wait_done(120) == [0]

    assert set(cluster.stored()) == {web.url("/flaky/a?fails=2")}
    times = attempt_times(web, "/flaky/a?fails=2")
    assert len(times) == 3
    first_gap, second_gap = times[1] - times[0], times[2] - times[1]
    assert first_gap >= 0.45 and second_gap >= 0.95  # 0.5 s, then 1 s
    assert second_gap > first_gap
    snap = cluster.snapshot()
    assert snap.counters.get("retries") == 2 and not snap.counters.get("dead")
    assert (snap.queued, snap.inflight, snap.delayed) == (0, 0, 0)


def test_retry_after_is_honoured(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=10, categories=1)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path, **ONLY_SEEDS,
                      RETRY_BACKOFF_BASE=0.1, THROTTLE_BACKOFF_BASE=0)
    cluster.seed(web.url("/ratelimit/x?n=1"))
    cluster.start(1)
    assert cluster.wait_done(120) == [0]

    assert set(cluster.stored()) == {web.url("/ratelimit/x?n=1")}
    times = attempt_times(web, "/ratelimit/x?n=1")
    assert len(times) == 2
    assert times[1] - times[0] >= 0.95  # Retry-After: 1, not the 0.1 s back-off
    assert cluster.snapshot().counters.get("slowdowns") == 1  # a 429 slows the domain


def test_permanent_failure_becomes_a_dead_letter(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=10, categories=1)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path, **ONLY_SEEDS,
                      RETRY_TIMES=2, RETRY_BACKOFF_BASE=0.2)
    cluster.seed(web.url("/fail/x"), web.url("/item/1"))
    cluster.start(1)
    assert cluster.wait_done(120) == [0]  # closed normally by MAX_IDLE_TIME_BEFORE_CLOSE

    assert fetch_counts(web.hits())["/fail/x"] == 3
    [record] = dead_records(cluster)
    assert record["url"] == web.url("/fail/x")
    assert record["error"] == "HTTP 500"
    assert record["attempts"] == 3
    assert record["first_attempt"] <= record["last_attempt"]
    assert record["last_attempt"] - record["first_attempt"] >= 0.2 + 0.4 - 0.05
    assert record["node"]
    assert json.loads(record["payload"])["u"] == web.url("/fail/x")
    assert set(cluster.stored()) == {web.url("/item/1")}  # the dead URL is not stored
    snap = cluster.snapshot()
    assert snap.counters.get("dead") == 1 and snap.counters.get("retries") == 2
    assert (snap.queued, snap.inflight, snap.delayed) == (0, 0, 0)
    logs = worker_logs(tmp_path)
    assert "Closing spider (finished)" in logs
    assert "Gave up on %s after 3 attempt(s): HTTP 500" % web.url("/fail/x") in logs
    assert "'frontier/dead/HTTP 500': 1" in logs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_connection_refused_is_retried_then_dead(redis_server, mongo_server, prefix, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/nobody-home"
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path, **ONLY_SEEDS,
                      RETRY_TIMES=2, RETRY_BACKOFF_BASE=0.3)
    cluster.seed(url)
    cluster.start(1)
    assert cluster.wait_done(120) == [0]  # the worker did not crash

    [record] = dead_records(cluster)
    assert record["url"] == url and record["attempts"] == 3
    assert "ConnectionRefused" in record["error"]
    assert record["last_attempt"] - record["first_attempt"] >= 0.3 + 0.6 - 0.05  # backed off
    logs = worker_logs(tmp_path)
    assert "Retry 1/2 of %s in 0.3s" % url in logs and "Retry 2/2 of %s in 0.6s" % url in logs
    # Scrapy's robots.txt middleware logs its own failed download (with a traceback); the
    # crawl itself raises nothing.
    assert "Spider error" not in logs and "Unhandled" not in logs
    assert "'frontier/dead/DownloadConnectionRefusedError': 1" in logs
    assert not cluster.stored()
