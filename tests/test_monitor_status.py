"""The status model and ``scrapy status`` against a real Redis holding hand-written keys."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import redis

from distscraper.frontier.keys import FrontierKeys
from distscraper.monitor.figures import read_figures
from distscraper.monitor.status import cluster_status, duration, format_status
from distscraper.sandbox.servers import free_port
from helpers import REPO_ROOT, scrapy_env

TWO32 = 2**32


def queue(r: redis.Redis, keys: FrontierKeys, domain: str, priorities: list[int], start: int = 1) -> None:
    """Queue one request per priority, scored like the frontier does."""
    for seq, prio in enumerate(priorities, start):
        payload = json.dumps({"u": f"http://{domain}/{seq}", "d": domain, "p": prio})
        r.zadd(keys.queue(domain), {payload: -prio * TWO32 + seq})


def heartbeat(r: redis.Redis, keys: FrontierKeys, node: str, ttl_ms: int = 10_000, age: float = 0.0,
              **fields: Any) -> None:
    now = time.time() - age
    beat = {"id": node, "host": "h", "pid": 1, "started": now - 100, "beat": now, "pages": 10,
            "items": 9, "pages_per_min": 60.0, "domains": {}, "inflight": 2, "errors": 0,
            "last_error": None, **fields}
    r.set(keys.node(node), json.dumps(beat), px=ttl_ms)
    r.zadd(keys.nodes, {node: int(now * 1000)})


@pytest.fixture
def keys(prefix: str) -> FrontierKeys:
    return FrontierKeys(prefix)


def everything(r: redis.Redis, keys: FrontierKeys) -> dict[bytes, bytes | None]:
    """Every key of the frontier with its serialized value: to prove reading wrote nothing."""
    return {k: r.dump(k) for k in sorted(r.scan_iter(match=keys.prefix + ":*"))}


def test_queue_bands_follow_the_score_layout(redis_client: redis.Redis, keys: FrontierKeys) -> None:
    queue(redis_client, keys, "a.com", [25, 10, 9, 1, 0, 0, -1, -7])
    # A request put back at the front of its band gets seq 0: -priority * 2**32 exactly.
    redis_client.zadd(keys.queue("a.com"), {b'{"u":"http://a.com/back","d":"a.com","p":1}': -TWO32,
                                           b'{"u":"http://a.com/b0","d":"a.com","p":0}': 0,
                                           b'{"u":"http://a.com/b9","d":"a.com","p":9}': -9 * TWO32,
                                           b'{"u":"http://a.com/b10","d":"a.com","p":10}': -10 * TWO32})
    queue(redis_client, keys, "b.com", [0, 0, 0])
    fig = read_figures(redis_client, keys)
    assert fig.bands == {"urgent": 3, "high": 4, "normal": 6, "low": 2}
    assert fig.queued == 15
    assert fig.by_domain == {"a.com": 12, "b.com": 3}


def test_cluster_status_figures(redis_client: redis.Redis, keys: FrontierKeys) -> None:
    r = redis_client
    queue(r, keys, "a.com", [0] * 5)
    r.zadd(keys.inflight, {b"x1": 1, b"x2": 2, b"x3": 3})
    r.zadd(keys.delayed, {b"d1": 1})
    r.hset(keys.dead, mapping={"fp1": "{}", "fp2": "{}"})
    r.sadd(keys.dupefilter, b"a" * 16, b"b" * 16, b"c" * 16, b"d" * 16)
    r.rpush(keys.start_urls, "http://s/1", "http://s/2")
    r.zadd(keys.seeds_pending, {b"http://s/3": 1})
    r.lpush(keys.seeds_invalid, "{}")
    r.lpush(keys.quarantine, "{}", "{}")
    r.hset(keys.stats, mapping={"done": 40, "retries": 3, "dead": 2, "enqueued": 50})
    before = everything(r, keys)
    st = cluster_status(r, keys)
    assert everything(r, keys) == before, "reading the status changed Redis"
    assert st["frontier"] == keys.prefix
    assert (st["queued"], st["inflight"], st["delayed"], st["dead"], st["seen"]) == (5, 3, 1, 2, 4)
    assert (st["seeds"], st["seeds_pending"], st["invalid_seeds"], st["quarantined"]) == (2, 1, 1, 2)
    assert (st["done"], st["errors"]) == (40, 5)
    assert st["documents"] is None and st["live_nodes"] == 0 and st["nodes"] == []
    assert st["pages_per_min"] == 0.0 and st["eta_s"] is None  # work left, nobody crawling
    assert st["counters"]["enqueued"] == 50
    json.dumps(st)  # JSON-able as is


def test_seen_without_a_plain_set_comes_from_the_counters(redis_client: redis.Redis,
                                                          keys: FrontierKeys) -> None:
    redis_client.hset(keys.dupefilter, mapping={"kind": "exact", "n": 3})  # a sharded seen-set's layout
    redis_client.hset(keys.stats, "enqueued", 77)
    assert cluster_status(redis_client, keys)["seen"] == 77  # an older frontier: only `enqueued`
    redis_client.hset(keys.stats, "seen", 80)
    assert cluster_status(redis_client, keys)["seen"] == 80


def test_live_nodes_need_a_recent_index_entry_and_a_live_key(redis_client: redis.Redis,
                                                             keys: FrontierKeys) -> None:
    r = redis_client
    heartbeat(r, keys, "alive-b", domains={"a.com": 30.0, "b.com": 6.0})
    heartbeat(r, keys, "alive-a", pages_per_min=90.0, domains={"a.com": 12.5},
              last_error={"at": 1.0, "message": "boom"})
    heartbeat(r, keys, "expired", ttl_ms=1)  # its key is gone: killed without a goodbye
    heartbeat(r, keys, "stale", age=30)  # its key lives on, but it has not beaten for 30 s
    r.zadd(keys.nodes, {"ghost": int(time.time() * 1000)})  # index entry without a key
    time.sleep(0.05)
    st = cluster_status(r, keys, ttl=10)
    assert [n["id"] for n in st["nodes"]] == ["alive-a", "alive-b"]
    assert st["live_nodes"] == 2
    assert st["nodes"][0]["last_error"]["message"] == "boom"
    assert 0 <= st["nodes"][0]["age_s"] < 5
    assert st["pages_per_min"] == 150.0 and st["rate_source"] == "nodes"
    assert st["top_domains_by_pace"] == [{"domain": "a.com", "pages_per_min": 42.5},
                                         {"domain": "b.com", "pages_per_min": 6.0}]


def test_top_domains_by_queue_are_the_ten_deepest(redis_client: redis.Redis, keys: FrontierKeys) -> None:
    for i in range(12):
        queue(redis_client, keys, f"d{i:02d}.com", [0] * (i + 1))
    top = cluster_status(redis_client, keys)["top_domains_by_queue"]
    assert [d["domain"] for d in top] == [f"d{i:02d}.com" for i in range(11, 1, -1)]
    assert top[0]["queued"] == 12


def test_rate_from_history_and_eta(redis_client: redis.Redis, keys: FrontierKeys) -> None:
    r = redis_client
    now = time.time()
    for age, done in ((90, 0), (30, 100), (20, 200), (10, 300)):  # the 90 s one is outside the minute
        r.lpush(keys.history, json.dumps({"t": now - age, "done": done, "queued": 0, "inflight": 0,
                                          "delayed": 0, "dead": 0, "errors": 0}))
    r.hset(keys.stats, "done", 400)
    queue(r, keys, "a.com", [0] * 500)
    heartbeat(r, keys, "n1", pages_per_min=1.0)
    st = cluster_status(r, keys)
    assert st["rate_source"] == "history"
    assert st["pages_per_min"] == pytest.approx(600, rel=0.15)  # 300 pages in 30 s
    assert st["eta_s"] == pytest.approx(500 / 10, rel=0.15)


def test_documents_come_from_mongodb(redis_client: redis.Redis, keys: FrontierKeys,
                                     mongo_server: Any, mongo_client: Any, prefix: str) -> None:
    mongo_client[prefix]["site"].insert_many([{"url": f"u{i}"} for i in range(7)])
    assert cluster_status(redis_client, keys, mongo_server.uri, database=prefix,
                          collection="site")["documents"] == 7


def test_unreachable_mongodb_gives_none_within_seconds(redis_client: redis.Redis, keys: FrontierKeys) -> None:
    started = time.monotonic()
    st = cluster_status(redis_client, keys, f"mongodb://127.0.0.1:{free_port()}", database="x")
    assert st["documents"] is None
    assert time.monotonic() - started < 15  # 2 s server selection, with room for a busy machine


def test_format_status(redis_client: redis.Redis, keys: FrontierKeys) -> None:
    queue(redis_client, keys, "a.com", [12, 0, 0])
    text = format_status(cluster_status(redis_client, keys))
    assert "no live nodes" in text and "urgent 1" in text and "normal 2" in text and "a.com" in text
    heartbeat(redis_client, keys, "node-7", last_error={"at": 1.0, "message": "timeout on http://x"})
    text = format_status(cluster_status(redis_client, keys))
    assert "node-7" in text and "timeout on http://x" in text and "no live nodes" not in text
    assert [duration(s) for s in (None, 5, 65, 3725)] == ["-", "5s", "1m05s", "1h02m"]


# -- the command ---------------------------------------------------------------------------
def status_cmd(prefix: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "scrapy", "status", *args, "-s", f"FRONTIER_KEY_PREFIX={prefix}",
            "-s", f"MONGO_DATABASE={prefix}"]


def test_status_command_json_and_table(redis_server: Any, mongo_server: Any, redis_client: redis.Redis,
                                       keys: FrontierKeys, prefix: str) -> None:
    queue(redis_client, keys, "a.com", [0, 0, 15])
    heartbeat(redis_client, keys, "cmd-node")
    env = scrapy_env(redis_server.url, mongo_server.uri)
    out = subprocess.run(status_cmd(prefix, "--json"), cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert st["queued"] == 3 and st["queue_bands"]["urgent"] == 1 and st["live_nodes"] == 1
    assert st["documents"] == 0  # the database is empty but reachable
    out = subprocess.run(status_cmd(prefix), cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"frontier {prefix}" in out.stdout and "cmd-node" in out.stdout


def test_status_command_reports_unreachable_redis(mongo_server: Any, prefix: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    out = subprocess.run(status_cmd(prefix), cwd=REPO_ROOT,
                         env=scrapy_env(url, mongo_server.uri), capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "cannot read Redis" in out.stderr and "Traceback" not in out.stderr


def test_status_watch_redraws_until_ctrl_c(redis_server: Any, mongo_server: Any, prefix: str) -> None:
    proc = subprocess.Popen(status_cmd(prefix, "--watch", "0.2"),
                            cwd=REPO_ROOT, env=scrapy_env(redis_server.url, mongo_server.uri),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        seen = b""
        fd = proc.stdout.fileno()  # type: ignore[union-attr]
        while seen.count(b"\x1b[2J") < 2 and time.monotonic() < deadline and proc.poll() is None:
            if select.select([fd], [], [], 1.0)[0]:
                seen += os.read(fd, 65536)
        assert seen.count(b"\x1b[2J") >= 2, "the screen was not redrawn"
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert b"Traceback" not in err
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
