"""The site alone and figures 5-9: frontier capacity, MongoDB writes, seen-set memory,
politeness cost and chaos. Same figure dicts as :mod:`benchmarks.figures`."""

from __future__ import annotations

import statistics
import traceback
from typing import Any

from benchmarks import capacity, mongo_writes
from benchmarks import politeness as politeness_bench
from benchmarks import seen_memory as seen_memory_bench
from benchmarks.chaos import LEASE_S, chaos, chaos_site
from benchmarks.figures import check, ratio
from benchmarks.lab import Lab
from benchmarks.static_site import load_test


def site_alone(lab: Lab, seconds: int) -> dict[str, Any]:
    """nginx serving the site under wrk, with nothing else running."""
    result = load_test(lab.site, seconds)
    return {"title": "0. The site alone (nginx, wrk)", "rows": [result],
            "checks": [check("site requests/s (wrk, 16 connections)", result["requests_per_s"], "-", None,
                             "far above any crawl rate below: the site is not the bottleneck")]}


def frontier_capacity(lab: Lab, runs: int, seconds: float, processes: int = 4) -> dict[str, Any]:
    rows, raw = [], {}
    for new in (10, 1):
        print(f"[bench] fig 5: capacity, 10 links/page of which {new} new", flush=True)
        results = capacity.run(lab.redis_server.url, processes=processes, seconds=seconds, links=10,
                               new=new, runs=runs)
        raw[f"new_{new}"] = results
        row: dict[str, Any] = {"links_per_page": 10, "new_links_per_page": new, "processes": processes}
        for key in ("pages_per_s", "exchanges_per_s", "redis_cpu_share", "redis_cpu_ms_per_page",
                    "one_core_pages_per_s"):
            values = [r[key] for r in results if r.get(key) is not None]
            row[key] = round(statistics.median(values), 4) if values else None
        rows.append(row)
    worst, steady = rows
    return {
        "title": "5. Frontier capacity (simulated workers, no HTTP)", "rows": rows, "runs": raw,
        "params": {"processes": processes, "seconds per run": seconds, "pop batch": capacity.POP,
                   "domains": capacity.DOMAINS, "cluster-wide slots per domain": 8},
        # Over a whole crawl every fetched page was queued once: 1 new link per page on average.
        "checks": [check("pages/s one Redis core sustains, 10 links per page, 1 new",
                         steady["one_core_pages_per_s"], ">= 20,000",
                         steady["one_core_pages_per_s"] is not None
                         and steady["one_core_pages_per_s"] >= 20_000,
                         f"{steady['redis_cpu_ms_per_page']} ms Redis CPU per page; measured "
                         f"{steady['pages_per_s']} pages/s with Redis busy {steady['redis_cpu_share']} "
                         f"of a core (the simulated workers share the 2 cores)"),
                   check("pages/s one Redis core sustains, 10 links per page, all 10 new",
                         worst["one_core_pages_per_s"], "-", None,
                         f"{worst['redis_cpu_ms_per_page']} ms Redis CPU per page; measured "
                         f"{worst['pages_per_s']} pages/s (a burst: the queue grows 9 per page)")],
    }


def mongo(lab: Lab, runs: int, items: int, single_items: int) -> dict[str, Any]:
    print("[bench] fig 6: MongoDB writes", flush=True)
    raw = mongo_writes.run(lab.mongo_server.uri, items=items, single_items=single_items, runs=runs,
                           server_pid=lab.mongo_server.pid)
    rows = [{"method": m, **{k: round(statistics.median(v), 3) if v else None for k, v in figs.items()}}
            for m, figs in raw.items()]
    rate = {r["method"]: r["items_per_s"] for r in rows}
    alone = rate["pipeline_component"]
    vs_insert, vs_upsert = ratio(alone, rate["insert_one"]), ratio(alone, rate["update_one_upsert"])
    in_crawler = ratio(rate["pipeline"], rate["insert_one"])
    note = ("MongoDB-wire server CPU ms per item: " + ", ".join(f"{r['method']} {r['server_cpu_ms_per_item']}"
                                                            for r in rows))
    return {
        "title": "6. MongoDB writes", "rows": rows, "runs": raw,
        "params": {"pipeline_component": f"the real MongoPipeline fed directly, {mongo_writes.WINDOW} "
                                         f"items unacknowledged at most, {items} items",
                   "pipeline": f"the real MongoPipeline in a Scrapy crawler ({mongo_writes.PARTS} "
                               f"responses), {items} items",
                   "one call per item": f"{single_items} items, pymongo, same unique index on url"},
        "checks": [check("pipeline / insert_one per item, items/s", vs_insert, ">= 10",
                         vs_insert is not None and vs_insert >= 10, note),
                   check("pipeline / update_one(upsert) per item, items/s", vs_upsert, ">= 10",
                         vs_upsert is not None and vs_upsert >= 10),
                   check("pipeline in a Scrapy crawler / insert_one per item, items/s", in_crawler,
                         "-", None, "Scrapy's own cost per item is in this figure, not in insert_one's")],
    }


def _get(d: Any, *path: str) -> Any:
    for key in path:
        d = d.get(key) if isinstance(d, dict) else None
    return d


def _failed(title: str, what: str) -> dict[str, Any]:
    """The figure of a benchmark whose run() raised: reported, the rest of the run goes on."""
    return {"title": title, "rows": [], "checks": [check(what, None, "-", None,
                                                         "run() failed: " + traceback.format_exc(limit=2)[-300:])]}


def seen_memory(urls: int) -> dict[str, Any]:
    title = "7. Seen-set memory"
    print(f"[bench] fig 7: seen-set memory, {urls} URLs", flush=True)
    try:
        result = seen_memory_bench.run(urls=urls)
    except Exception:  # noqa: BLE001 - one failed figure must not abort the whole run
        return _failed(title, "seen-set memory")
    bloom, fp = _get(result, "bloom", "bytes_per_url"), _get(result, "bloom", "false_positive_rate")
    exact, anchor = _get(result, "exact", "bytes_per_url"), _get(result, "scrapy_redis", "bytes_per_url")
    return {
        "title": title, "result": result,
        "checks": [
            check("Bloom bytes per URL", bloom, "<= 2", None if bloom is None else bloom <= 2),
            check("Bloom false-positive rate", fp, "<= 0.001", None if fp is None else fp <= 0.001),
            check("exact seen-set bytes per URL", exact, "<= 60", None if exact is None else exact <= 60,
                  f"anchor scrapy-redis: {anchor} bytes per URL"),
        ],
    }


def politeness() -> dict[str, Any]:
    title = "8. Politeness cost"
    print("[bench] fig 8: politeness cost", flush=True)
    try:
        result = politeness_bench.run()
    except Exception:  # noqa: BLE001 - one failed figure must not abort the whole run
        return _failed(title, "politeness cost")
    return {"title": title, "result": result, "checks": []}


def chaos_figure(lab: Lab, pages: int) -> dict[str, Any]:
    site = chaos_site(lab, pages)
    try:
        raw = {}
        for variant in ("distscraper", "scrapy_redis"):
            print(f"[bench] fig 9: chaos, {variant}", flush=True)
            raw[variant] = chaos(lab, site, variant)
    finally:
        site.stop()
    d, s = raw["distscraper"], raw["scrapy_redis"]
    leases = sum(k["lost_leases"] for k in d["kill_log"])
    rows = [{k: v for k, v in r.items() if k not in ("kill_log", "logs")} for r in raw.values()]
    explain = ["Kills of the distscraper run (s after start: leases lost, s until back in the queue): "
               + "; ".join(f"{k['at_s']}: {k['lost_leases']}, {_cell_s(k['recovery_s'])}" for k in d["kill_log"]),
               "", f"Kills of the scrapy-redis run at (s): {', '.join(str(k['at_s']) for k in s['kill_log'])}"]
    explain.append(f"\nThe longest time no worker fetched anything: distscraper {d['longest_pause_s']} s, "
                   f"scrapy-redis {s['longest_pause_s']} s.")
    return {
        "title": "9. Chaos: kill -9 a random worker every 5-10 s", "rows": rows, "runs": raw, "explain": explain,
        "params": {"site": f"SiteSpec(seed=2, pages={pages}): {d['pages']} reachable pages", "workers": 3, "FRONTIER_LEASE_TIME": LEASE_S, "DOWNLOAD_TIMEOUT": 5,
                   "runs": "1 per variant (one long experiment each; seeded kill schedule)"},
        "checks": [
            check("distscraper pages lost", d["lost"], "0", d["lost"] == 0, f"scrapy-redis lost {s['lost']}"),
            check("distscraper pages fetched more than once, % of pages", d["fetched_twice_pct"], "<= 1",
                  d["fetched_twice_pct"] <= 1,
                  f"{d['fetched_more_than_once']} pages after {d['kills']} kills, "
                  f"{leases} leases lost in all: downloads in flight plus pages whose items waited "
                  f"for their MongoDB batch (acked only once stored); scrapy-redis "
                  f"{s['fetched_twice_pct']}% after {s['kills']} kills"),
            check("lease recovery after a kill, max s", d["recovery_s_max"], "-", None,
                  f"median {d['recovery_s_median']} s with a {LEASE_S} s lease, over the "
                  f"{d['kills_that_lost_leases']} kills whose worker held leases"),
        ],
    }


def _cell_s(value: float | None) -> str:
    return "-" if value is None else f"{value} s"
