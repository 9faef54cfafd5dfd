"""One measured crawl of the lab's site by distscraper or an anchor.

:func:`crawl` starts N workers of one variant on a clean Redis and MongoDB,
seeds them the way a user does, waits for them to finish and returns what was
measured:

* pages/s from the site's access log, first to last response (process
  start-up and the idle wait before closing are excluded);
* worker CPU seconds per page (user+sys from ``wait4``, minus the CPU spent
  before the first response, i.e. start-up);
* Redis round trips (``total_reads_processed``), commands (``total_commands_processed``,
  commands run inside Lua scripts included) and CPU per page, from INFO deltas;
* MongoDB server and nginx CPU per page (psutil), stored items, pages missing
  from MongoDB and pages fetched more than once (access log).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from typing import Any

import psutil

from benchmarks import workers
from benchmarks.lab import Lab
from distscraper.sandbox.demo import redis_cli

COMMON = {
    "CONCURRENT_REQUESTS": 16,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "ROBOTSTXT_OBEY": True,
    "LOG_LEVEL": "INFO",
    "MONGO_DATABASE": "bench",
}
ANCHOR = {
    "SPIDER_MODULES": "distscraper.spiders,benchmarks.anchor_spiders",
    "SPIDER_MIDDLEWARES": "{}",  # Scrapy's defaults (SPIDER_MIDDLEWARES_BASE)
    "DOWNLOADER_MIDDLEWARES": "{}",  # Scrapy's defaults, with its RetryMiddleware
    "EXTENSIONS": "{}",  # no distscraper heartbeat or metrics
}
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "distscraper": ("site", {"MAX_IDLE_TIME_BEFORE_CLOSE": 2}),
    "memory": ("bench_memory", {**ANCHOR, "SCHEDULER": "scrapy.core.scheduler.Scheduler",
                                "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter"}),
    "scrapy_redis": ("bench_scrapy_redis", {**ANCHOR, "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                                            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
                                            "SCHEDULER_PERSIST": True,
                                            "MAX_IDLE_TIME_BEFORE_CLOSE": 2}),
}


def _cpu(pid: int | None, children: bool = False) -> float:
    if pid is None:
        return 0.0
    try:
        proc = psutil.Process(pid)
        procs = [proc] + (proc.children(recursive=True) if children else [])
        return sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    except psutil.Error:
        return 0.0


def _redis_info(lab: Lab) -> dict[str, float]:
    assert lab.redis is not None
    info = lab.redis.info("all")
    out = {"reads": info["total_reads_processed"], "commands": info["total_commands_processed"],
           "cpu": info["used_cpu_user"] + info["used_cpu_sys"]}
    for key, value in info.items():
        if key.startswith("cmdstat_"):
            out[key[8:]] = value["calls"]
    return out


def seed(lab: Lab, key: str, value: str, redis_url: str | None = None) -> None:
    """``redis-cli -u <url> lpush <key> <value>``, as a user seeds a crawl."""
    subprocess.run([redis_cli(), "-u", redis_url or lab.redis_server.url, "lpush", key, value],
                   check=True, stdout=subprocess.DEVNULL)


def crawl(lab: Lab, variant: str, tag: str, *, n_workers: int = 1, redis_url: str | None = None,
          page_budget: int = 0, timeout: float = 900) -> dict[str, Any]:
    """Crawl the site once with *n_workers* workers of *variant*; see module docstring.

    With *page_budget*, the crawl stops after about that many pages instead of
    crawling the whole site: one worker by Scrapy's CLOSESPIDER_PAGECOUNT;
    several workers by SIGTERM (a graceful stop) once the site has served
    that many pages, so that no worker is held to an equal share.
    """
    spider, settings = VARIANTS[variant]
    settings = {**COMMON, **settings}
    if page_budget and n_workers == 1:
        settings["CLOSESPIDER_PAGECOUNT"] = page_budget
    env = lab.env
    if redis_url:
        env["REDIS_URL"] = redis_url
    lab.reset()
    root = lab.site.url("/")
    args: dict[str, str] = {}
    if variant == "distscraper":
        seed(lab, "site:start_urls", root)
    elif variant == "scrapy_redis":
        seed(lab, "bench_scrapy_redis:start_urls", json.dumps({"url": root, "meta": {}}))
    else:
        args = {"start_url": root}
    mark0 = lab.site.mark()
    info0 = _redis_info(lab)
    mongo_cpu0, site_cpu0 = _cpu(lab.mongo_server.pid), _cpu(lab.site.proc.pid, children=True)
    logs = lab.log_dir(tag)
    procs = [workers.start(spider, settings, env, logs / f"worker-{i}.log", args)
             for i in range(n_workers)]

    served = {"offset": mark0, "lines": 0, "stopping": False}

    def on_tick() -> None:
        if procs[0].cpu_at_start is None and lab.site.mark() > mark0:  # what start-up cost
            for w in procs:
                w.cpu_at_start = w.cpu_now() or 0.0
        if page_budget and n_workers > 1 and not served["stopping"]:
            end = lab.site.mark()
            served["lines"] += len(lab.site.hits(served["offset"], end))
            served["offset"] = end
            if served["lines"] >= page_budget:
                served["stopping"] = True
                for w in procs:
                    w.signal(signal.SIGTERM)

    workers.wait_all(procs, timeout, on_tick)
    info1 = _redis_info(lab)
    mongo_cpu, site_cpu = _cpu(lab.mongo_server.pid) - mongo_cpu0, \
        _cpu(lab.site.proc.pid, children=True) - site_cpu0
    hits = [h for h in lab.site.hits(mark0) if h.path != "/robots.txt"]
    counts = Counter(h.path for h in hits)
    pages = len(hits)
    span = (hits[-1].t - hits[0].t) if pages > 1 else 0.0
    assert lab.mongo is not None
    docs = list(lab.mongo["bench"][spider].find({}, {"url": 1, "node": 1, "_id": 0}))
    stored = {d["url"] for d in docs}
    per_node = sorted(Counter(d.get("node") for d in docs).values(), reverse=True)
    expected = lab.site.expected_urls()
    worker_cpu = sum((w.cpu_total or 0.0) - (w.cpu_at_start or 0.0) for w in procs)
    stats = [workers.log_stats(w.log_path) for w in procs]
    delta = {k: info1.get(k, 0) - info0.get(k, 0) for k in info1}
    delta["reads"] -= 1  # our own INFO
    delta["commands"] -= 1
    result: dict[str, Any] = {
        "variant": variant, "workers": n_workers, "exit_codes": [w.proc.returncode for w in procs],
        "pages": pages, "unique_pages": len(counts), "seconds": round(span, 3),
        "pages_per_s": round(pages / span, 1) if span else 0.0,
        "worker_cpu_ms_per_page": round(1000 * worker_cpu / max(pages, 1), 3),
        "startup_cpu_s": round(sum(w.cpu_at_start or 0.0 for w in procs) / n_workers, 2),
        "redis_round_trips_per_page": round(delta["reads"] / max(pages, 1), 2),
        "redis_commands_per_page": round(delta["commands"] / max(pages, 1), 2),
        "redis_cpu_ms_per_page": round(1000 * delta["cpu"] / max(pages, 1), 3),
        "redis_top_commands_per_page": {
            k: round(v / max(pages, 1), 2) for k, v in sorted(
                ((k, v) for k, v in delta.items() if k not in ("reads", "commands", "cpu") and v > 0),
                key=lambda kv: -kv[1])[:8]},
        "mongo_cpu_ms_per_page": round(1000 * mongo_cpu / max(pages, 1), 3),
        "site_cpu_ms_per_page": round(1000 * site_cpu / max(pages, 1), 3),
        "stored": len(stored), "missing": None if page_budget else len(expected - stored),
        "fetched_twice": sum(1 for n in counts.values() if n > 1),
        "items_per_worker": per_node,
        "logs": str(logs),
    }
    scheduled = sum(s.get("scheduler/enqueued/redis", 0) + s.get("scheduler/enqueued/memory", 0)
                    for s in stats)  # Scrapy's counts: anchors after their dupefilter, distscraper every link
    result["scheduler_enqueued_per_page"] = round(scheduled / max(pages, 1), 2)
    trips = sum(s.get("frontier/round_trips", 0) for s in stats)
    if trips:
        exchange_ms = sum(s.get("frontier/exchange_ms", 0) for s in stats)
        result["frontier_round_trips_per_page"] = round(trips / max(pages, 1), 3)
        if exchange_ms:
            result["exchange_ms_mean"] = round(exchange_ms / trips, 3)
            result["exchange_ms_max"] = round(max(s.get("frontier/exchange_max_ms", 0) for s in stats), 2)
    return result


def settle(seconds: float = 1.0) -> None:
    """A short pause between runs, so one run's shutdown does not overlap the next."""
    time.sleep(seconds)
