"""`scrapy status --json` watching a real 3-worker crawl: nodes, queue, a killed worker, the end."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pymongo
import pytest
import redis

from distscraper.frontier.keys import FrontierKeys
from helpers import REPO_ROOT, log_tail, scrapy_env, start_worker, stop_worker, wait_all

TTL = 3.0
POLL = 1.0  # seconds between `scrapy status` runs (each costs a Python start-up: spare the CPU)


def read_status(env: dict[str, str], prefix: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "scrapy", "status", "--json", "-s", f"FRONTIER_KEY_PREFIX={prefix}",
                          "-s", f"MONGO_DATABASE={prefix}", "-s", f"HEARTBEAT_TTL={TTL}"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_for(env: dict[str, str], prefix: str, ok: Callable[[dict[str, Any]], bool], timeout: float,
             what: str, workers: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = read_status(env, prefix)
        if ok(status):
            return status
        time.sleep(POLL)
    raise AssertionError(f"{what}: not within {timeout:.0f}s; last status {json.dumps(status)[:2000]}\n"
                         + "\n".join(log_tail(w) for w in workers))


@pytest.mark.slow
def test_status_follows_a_three_worker_crawl(redis_server: Any, mongo_server: Any, redis_client: redis.Redis,
                                             mongo_client: pymongo.MongoClient[Any], prefix: str,
                                             site: Callable[..., Any], tmp_path: Path) -> None:
    server = site(pages=2000)
    env = scrapy_env(redis_server.url, mongo_server.uri)
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": 5, "HEARTBEAT_INTERVAL": 0.5, "HEARTBEAT_TTL": TTL,
                "FRONTIER_KEY_PREFIX": prefix, "MONGO_DATABASE": prefix, "DOWNLOAD_DELAY": 0,
                "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
                # a killed worker's leases come back after 8 s rather than the default 60 s
                "DOWNLOAD_TIMEOUT": 5, "FRONTIER_LEASE_TIME": 8}
    workers = [start_worker({**settings, "NODE_ID": f"{prefix}-w{i}"}, env, tmp_path / f"w{i}.log")
               for i in range(3)]
    ids = [f"{prefix}-w{i}" for i in range(3)]
    try:
        redis_client.lpush(FrontierKeys(prefix).start_urls, server.url("/"))
        first = wait_for(env, prefix, lambda s: s["live_nodes"] == 3 and s["inflight"] > 0 and s["queued"] > 0,
                         60, "3 live nodes with work in flight", workers)
        assert sorted(n["id"] for n in first["nodes"]) == ids

        # Kill the node holding the fewest leases (any would do; its leases would delay the end).
        victim_id = min(first["nodes"], key=lambda n: (n["inflight"], n["id"]))["id"]
        victim = workers[ids.index(victim_id)]
        stop_worker(victim, signal.SIGKILL, timeout=10)
        others = [w for w in workers if w is not victim]

        # Its heartbeat key expires TTL after its last beat: any read after that must not list it.
        time.sleep(TTL + 0.5)
        gone = read_status(env, prefix)
        assert victim_id not in {n["id"] for n in gone["nodes"]}, "the killed node outlived its TTL"
        assert {n["id"] for n in gone["nodes"]} <= set(ids) - {victim_id}

        # The queue shrinks between two reads while the survivors crawl.
        previous, status = first, gone
        deadline = time.monotonic() + 120
        while status["queued"] >= previous["queued"]:
            assert time.monotonic() < deadline, f"the queue never shrank: last status {status}"
            time.sleep(POLL)
            previous, status = status, read_status(env, prefix)

        assert wait_all(others, timeout=180) == [0, 0]
        final = read_status(env, prefix)
    finally:
        for proc in workers:
            stop_worker(proc, signal.SIGKILL, timeout=10)
    assert (final["queued"], final["inflight"], final["delayed"], final["dead"]) == (0, 0, 0, 0)
    assert final["live_nodes"] == 0 and final["eta_s"] == 0.0
    expected = server.spec.expected_urls(server.base_url)
    assert final["documents"] == len(expected)
    stored = {d["url"] for d in mongo_client[prefix]["site"].find({}, {"url": 1})}
    assert stored == expected
