"""`make bench`: every benchmark side by side in one run; writes RESULTS.md and results.json.

``python -m benchmarks.run`` (full: about 15 minutes on 2 cores) or ``--quick``
(one run of each, smaller sizes, for development; results go to
``--out``, by default a temporary folder, never over the committed results).
``--only 1,5`` runs some figures (0 is the site alone). Servers (Redis, the
MongoDB-wire server, nginx) are started here on free loopback ports and
stopped by PID at the end; nginx and wrk are installed with apt-get only when
their binaries are missing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from benchmarks import figures, machine, report, side_figures
from benchmarks.figures import check
from benchmarks.lab import Lab

PROFILES: dict[str, dict[str, Any]] = {
    "full": {"pages": 20_000, "runs": 3, "page_budget": 5_000, "wrk_seconds": 5, "capacity_seconds": 8,
             "mongo_items": 5_000, "mongo_single_items": 1_000, "seen_urls": 1_000_000,
             "chaos_pages": 10_000},
    "quick": {"pages": 3_000, "runs": 1, "page_budget": 0, "wrk_seconds": 2, "capacity_seconds": 3,
              "mongo_items": 2_000, "mongo_single_items": 500, "seen_urls": 100_000,
              "chaos_pages": 3_000},
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run of each, smaller sizes")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (median reported)")
    parser.add_argument("--only", default="", help="comma-separated figure numbers, e.g. 0,1,5")
    parser.add_argument("--out", default=None, help="folder for RESULTS.md and results.json")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, site)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mode = "quick" if args.quick else "full"
    p = dict(PROFILES[mode])
    if args.runs:
        p["runs"] = args.runs
    only = {int(x) for x in args.only.split(",") if x.strip()} or set(range(10))
    out = Path(args.out) if args.out else (Path(tempfile.gettempdir()) / "distscraper-bench-quick"
                                           if args.quick else report.HERE)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    lab = Lab(pages=p["pages"], runs=p["runs"], quick=args.quick, keep=args.keep)
    print(f"[bench] {mode} mode, work folder {lab.work}; rendering a {p['pages']}-page site", flush=True)
    lab.start()
    assert lab.redis is not None
    meta = machine.describe(lab.redis.info("server")["redis_version"])
    meta.update(mode=mode, command="python -m benchmarks.run" + (" --quick" if args.quick else ""),
                code=machine.code_state(str(report.HERE.parent)))
    meta["params"] = {
        "site": f"SiteSpec(pages={p['pages']}): {lab.site.pages} reachable pages, pre-rendered, nginx "
                f"(1 worker process) on 127.0.0.1",
        "runs per figure": f"{p['runs']} (median reported; figure 9: 1 per variant)",
        "crawl settings (all variants)": "CONCURRENT_REQUESTS=16, CONCURRENT_REQUESTS_PER_DOMAIN=8, "
                                         "ROBOTSTXT_OBEY=True, LOG_LEVEL=INFO, MongoPipeline (batch 100)",
        "pages measured per crawl": (f"the first {p['page_budget']} pages of the {lab.site.pages}-page site "
                                     "(one worker: CLOSESPIDER_PAGECOUNT; several: SIGTERM once nginx "
                                     "has served that many)")
        if p["page_budget"] else "the whole site",
        "figure 5": f"{p['capacity_seconds']} s per run, 4 simulated worker processes",
        "figure 6": f"pipeline {p['mongo_items']} items, one-call-per-item {p['mongo_single_items']} items",
        "figure 7": f"{p['seen_urls']} URLs",
        "figure 9": f"{p['chaos_pages']}-page site, 3 workers",
    }
    figs: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    one: dict[str, Any] = {}

    def step(number: int, name: str, fn: Callable[[], Any]) -> None:
        if number not in only:
            return
        t0 = time.monotonic()
        try:
            result = fn()
            for fig in result if isinstance(result, tuple) else (result,):
                figs.append(fig)
        except Exception:  # one broken figure must not lose the others
            traceback.print_exc()
            figs.append({"title": name, "checks": [check("figure failed", None, "-", None,
                                                         "failed: " + traceback.format_exc(limit=3)[-400:])]})
        timings[name] = round(time.monotonic() - t0, 1)
        print(f"[bench] {name}: {timings[name]} s", flush=True)

    def fig1_2() -> tuple[dict[str, Any], dict[str, Any]]:
        f1, f2 = figures.one_worker(lab, p["runs"], p["page_budget"])
        one.update(next(r for r in f1["rows"] if r["variant"] == "distscraper"))
        return f1, f2

    try:
        step(0, "0. The site alone", lambda: side_figures.site_alone(lab, p["wrk_seconds"]))
        step(1, "1-2. One worker, Redis traffic", fig1_2)
        step(3, "3. Redis 1 ms away", lambda: figures.remote_redis(lab, p["runs"], p["page_budget"],
                                                                    one.get("pages_per_s")))
        step(4, "4. Two workers", lambda: figures.two_workers(lab, p["runs"], p["page_budget"], one))
        step(5, "5. Frontier capacity", lambda: side_figures.frontier_capacity(lab, p["runs"], p["capacity_seconds"]))
        step(6, "6. MongoDB writes", lambda: side_figures.mongo(lab, p["runs"], p["mongo_items"],
                                                                 p["mongo_single_items"]))
        step(7, "7. Seen-set memory", lambda: side_figures.seen_memory(p["seen_urls"]))
        step(8, "8. Politeness cost", side_figures.politeness)
        step(9, "9. Chaos", lambda: side_figures.chaos_figure(lab, p["chaos_pages"]))
    finally:
        lab.close()
    meta["load_at_end"] = machine.load()
    meta["code"]["changed_during_run"] = machine.changed_since(str(report.HERE.parent), meta["started"])
    meta["minutes"] = round((time.monotonic() - t_start) / 60, 1)
    meta["params"]["seconds per figure"] = timings
    md, js = report.write(meta, figs, out / "RESULTS.md", out / "results.json")
    print(f"[bench] done in {meta['minutes']} min: {md}, {js}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
