"""Figures 1-4: crawl throughput of one and two workers, Redis traffic, Redis 1 ms away.

Each function runs its crawls (see :func:`benchmarks.crawl.crawl`), takes the
median of every measured number over the runs, and returns a figure dict for
report.py: ``title``, ``params``, ``rows`` (one dict per variant), ``checks``
(value, target, PASS/MISS, note) and ``runs`` (every raw measurement).
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.crawl import crawl, settle
from benchmarks.lab import Lab
from benchmarks.latency_proxy import LatencyProxy, ping_rtt_ms

ROW_KEYS = ("pages", "seconds", "pages_per_s", "worker_cpu_ms_per_page", "startup_cpu_s",
            "scheduler_enqueued_per_page",
            "redis_round_trips_per_page", "redis_commands_per_page", "redis_cpu_ms_per_page",
            "frontier_round_trips_per_page", "exchange_ms_mean", "exchange_ms_max",
            "mongo_cpu_ms_per_page", "site_cpu_ms_per_page", "missing", "fetched_twice")


def median_row(runs: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """The median of each number over the runs (max for maxima, sum-free)."""
    row: dict[str, Any] = {"variant": label, "runs": len(runs)}
    for key in ROW_KEYS:
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
        if values:
            row[key] = max(values) if key.endswith("_max") else round(statistics.median(values), 3)
    row["redis_top_commands_per_page"] = runs[len(runs) // 2].get("redis_top_commands_per_page")
    return row


def check(what: str, value: Any, target: str, ok: bool | None, note: str = "") -> dict[str, Any]:
    """One line of the results table; ``ok=None`` for a figure reported without a target."""
    if value is None:
        result = "not measured"
    else:
        result = "reported" if ok is None else ("PASS" if ok else "MISS")
    return {"what": what, "value": value, "target": target, "result": result, "note": note}


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def one_worker(lab: Lab, runs: int, budget: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Figures 1 and 2: one worker of each variant, runs interleaved (order rotated per run)."""
    order = ["distscraper", "memory", "scrapy_redis"]
    raw: dict[str, list[dict[str, Any]]] = {v: [] for v in order}
    for r in range(runs):
        for variant in order[r % 3:] + order[:r % 3]:
            print(f"[bench] fig 1: {variant} run {r + 1}/{runs}", flush=True)
            raw[variant].append(crawl(lab, variant, f"fig1-{variant}-{r}", page_budget=budget))
            settle()
    rows = {v: median_row(raw[v], v) for v in order}
    ds, mem, sr = (rows[v].get("pages_per_s") for v in order)
    r_mem, r_sr = ratio(ds, mem), ratio(ds, sr)
    cpu = {v: rows[v].get("worker_cpu_ms_per_page") for v in order}
    fig1 = {
        "title": "1. One worker throughput", "rows": list(rows.values()), "runs": raw,
        "checks": [
            check("distscraper / in-memory Scrapy, pages/s", r_mem, ">= 0.9", r_mem is not None and r_mem >= 0.9,
                  f"CPU per page: distscraper {cpu['distscraper']} ms, in-memory {cpu['memory']} ms"),
            check("distscraper / scrapy-redis, pages/s", r_sr, ">= 1.3", r_sr is not None and r_sr >= 1.3,
                  f"CPU per page: scrapy-redis {cpu['scrapy_redis']} ms; ratio of CPU per page "
                  f"{ratio(cpu['scrapy_redis'], cpu['distscraper'])}"),
        ],
    }
    d, s = rows["distscraper"], rows["scrapy_redis"]
    fig2 = {
        "title": "2. Redis round trips per fetched page",
        "rows": [{"variant": v, **{k: rows[v].get(k) for k in (
            "redis_round_trips_per_page", "redis_commands_per_page", "redis_cpu_ms_per_page",
            "frontier_round_trips_per_page", "exchange_ms_mean", "exchange_ms_max",
            "redis_top_commands_per_page")}} for v in ("distscraper", "scrapy_redis")],
        "checks": [
            check("distscraper Redis round trips per page", d.get("redis_round_trips_per_page"), "<= 3",
                  (d.get("redis_round_trips_per_page") or 99) <= 3,
                  f"scrapy-redis: {s.get('redis_round_trips_per_page')} round trips, "
                  f"{s.get('redis_commands_per_page')} commands per page"),
            check("frontier exchange duration (frontier/exchange_ms), mean / max ms",
                  d.get("exchange_ms_mean"), "-", None,
                  f"max {d.get('exchange_ms_max')} ms"),
        ],
    }
    return fig1, fig2


def remote_redis(lab: Lab, runs: int, budget: int, local: float | None) -> dict[str, Any]:
    """Figure 3: one distscraper worker whose Redis is ~1 ms away (latency proxy)."""
    assert lab.redis_server.port is not None
    proxy = LatencyProxy(lab.redis_server.port).start()
    try:
        added = proxy.calibrate(1.0)
        direct = ping_rtt_ms(lab.redis_server.port)
        raw = []
        for r in range(runs):
            print(f"[bench] fig 3: distscraper via 1 ms proxy, run {r + 1}/{runs}", flush=True)
            raw.append(crawl(lab, "distscraper", f"fig3-{r}", redis_url=proxy.url, page_budget=budget))
            settle()
    finally:
        proxy.stop()
    row = median_row(raw, "distscraper, Redis +1 ms")
    value = ratio(row.get("pages_per_s"), local)
    return {
        "title": "3. Redis 1 ms away", "rows": [row], "runs": raw,
        "params": {"PING round trip direct, ms": round(direct, 3),
                   "PING round trip through the proxy, ms": round(direct + added, 3),
                   "proxy delay each way, ms": round(proxy.delay * 1000, 3)},
        "checks": [check("pages/s with Redis 1 ms away / local Redis", value, ">= 0.8",
                         value is not None and value >= 0.8,
                         f"local median {local} pages/s (figure 1)")],
    }


def two_workers(lab: Lab, runs: int, budget: int, one: dict[str, Any]) -> dict[str, Any]:
    """Figure 4: two distscraper workers on the 2-core machine."""
    raw = []
    for r in range(runs):
        print(f"[bench] fig 4: two distscraper workers, run {r + 1}/{runs}", flush=True)
        raw.append(crawl(lab, "distscraper", f"fig4-{r}", n_workers=2, page_budget=budget))
        settle()
    row = median_row(raw, "distscraper x2")
    twice = sum(r["fetched_twice"] for r in raw)
    speedup = ratio(row.get("pages_per_s"), one.get("pages_per_s"))
    return {
        "title": "4. Two workers on 2 cores", "rows": [one, row], "runs": raw,
        "checks": [
            check("pages fetched twice (all runs)", twice, "0", twice == 0),
            check("speed-up of 2 workers vs 1", speedup, "-", None,
                  f"CPU per page {row.get('worker_cpu_ms_per_page')} ms (1 worker: "
                  f"{one.get('worker_cpu_ms_per_page')} ms); items stored per worker, each run: "
                  f"{'; '.join(str(r.get('items_per_worker')) for r in raw)}; the 2 cores also run "
                  f"nginx, Redis and the MongoDB-wire server"),
        ],
    }
