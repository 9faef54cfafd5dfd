"""Chaos: ``kill -9`` a random worker every 5-10 s during a crawl, and count the damage.

:func:`chaos` crawls a generated site (>= 10,000 pages in the full run) with
3 workers; every 5-10 s (seeded random) it SIGKILLs one worker by PID and
starts a replacement, until 95% of the pages are stored. At the end:

* pages lost: reachable URLs that are not in MongoDB;
* pages fetched more than once (nginx access log) as a share of the pages;
* for distscraper, per kill, how long the dead worker's leases took to be back
  in the queue: the in-flight entries (payload -> lease deadline) are read just
  before the kill; those still under the same deadline 2 s later are the dead
  worker's (live workers ack within milliseconds, or renew, which changes the
  deadline); a lease is back once it left ``inflight`` or was leased again.

The same schedule runs side by side with plain scrapy-redis. ``python -m
benchmarks.chaos [--pages N]`` runs both on servers of its own.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from benchmarks import workers
from benchmarks.crawl import COMMON, VARIANTS, seed
from benchmarks.lab import Lab
from benchmarks.static_site import StaticSite

LEASE_S = 10
DOWNLOAD_TIMEOUT = 5
SETTINGS = {"FRONTIER_LEASE_TIME": LEASE_S, "DOWNLOAD_TIMEOUT": DOWNLOAD_TIMEOUT,
            "MAX_IDLE_TIME_BEFORE_CLOSE": 5}


@dataclass
class Kill:
    at: float
    pid: int
    before: dict[bytes, float]
    lost: dict[bytes, float] | None = None
    recovered_at: float | None = None
    back: set[bytes] = field(default_factory=set)

    def summary(self, t0: float) -> dict[str, Any]:
        return {"at_s": round(self.at - t0, 1), "pid": self.pid,
                "lost_leases": len(self.lost or ()),
                "recovery_s": round(self.recovered_at - self.at, 2) if self.recovered_at else None}


def _track(lab: Lab, kill: Kill, earlier: list[Kill], now: float) -> None:
    """Advance one kill's recovery measurement (distscraper only); leases an *earlier*
    kill already lost are not this one's."""
    assert lab.redis is not None
    if kill.recovered_at is not None or now < kill.at + 2.0 or any(k.lost is None for k in earlier):
        return
    members = list(kill.before if kill.lost is None else kill.lost)
    pipe = lab.redis.pipeline(transaction=False)
    for m in members:
        pipe.zscore("site:inflight", m)
    scores = dict(zip(members, pipe.execute()))
    if kill.lost is None:
        theirs = {m for k in earlier for m in (k.lost or ())}
        kill.lost = {m: s for m, s in kill.before.items() if scores[m] == s and m not in theirs}
    for m, s in kill.lost.items():
        if m not in kill.back and scores.get(m) != s:
            kill.back.add(m)
    if kill.lost and len(kill.back) == len(kill.lost):
        kill.recovered_at = now


def chaos(lab: Lab, site: StaticSite, variant: str, *, n_workers: int = 3, seed_value: int = 7,
          timeout: float = 900) -> dict[str, Any]:
    """One chaos crawl of *site* by *variant* ("distscraper" or "scrapy_redis")."""
    assert lab.redis is not None and lab.mongo is not None
    spider, base = VARIANTS[variant]
    settings = {**COMMON, **base, **SETTINGS, "MONGO_DATABASE": "chaos"}
    lab.reset()
    expected = site.expected_urls()
    if variant == "distscraper":
        seed(lab, "site:start_urls", site.url("/"))
    else:
        seed(lab, f"{spider}:start_urls", json.dumps({"url": site.url("/"), "meta": {}}))
    rng = random.Random(seed_value)
    logs = lab.log_dir(f"chaos-{variant}")
    mark = site.mark()
    procs: list[workers.Worker] = []

    def spawn() -> None:
        procs.append(workers.start(spider, settings, lab.env, logs / f"worker-{len(procs)}.log"))

    for _ in range(n_workers):
        spawn()
    t0 = time.monotonic()
    while site.mark() == mark and time.monotonic() - t0 < 120:  # the kill clock starts with the crawl
        time.sleep(0.05)
    next_kill = time.monotonic() + rng.uniform(5, 10)
    kills: list[Kill] = []
    coll = lab.mongo["chaos"][spider]
    killing = True
    stored, progress_at = -1, time.monotonic()
    while True:
        now = time.monotonic()
        alive = [w for w in procs if not w.reap()]
        for i, kill in enumerate(kills):
            if variant == "distscraper":
                _track(lab, kill, kills[:i], now)
        if not alive:
            break
        if now - t0 > timeout:
            for w in alive:
                w.signal(signal.SIGKILL)
                w.reap(block=True)
            raise TimeoutError(f"chaos crawl of {variant} not done after {timeout:.0f}s; logs in {logs}")
        if killing and now >= next_kill and alive:
            stored_now = coll.estimated_document_count()
            if stored_now != stored:
                stored, progress_at = stored_now, now
            if stored_now >= 0.95 * len(expected) or now - progress_at > 30:
                killing = False  # nearly done, or nothing has moved for 30 s
            else:
                before = {m: s for m, s in lab.redis.zrange("site:inflight", 0, -1, withscores=True)} \
                    if variant == "distscraper" else {}
                victim = rng.choice(alive)
                victim.signal(signal.SIGKILL)
                victim.reap(block=True)
                kills.append(Kill(time.monotonic(), victim.pid, before))
                spawn()
                next_kill = time.monotonic() + rng.uniform(5, 10)
        time.sleep(0.05)
    duration = time.monotonic() - t0
    stored = {d["url"] for d in coll.find({}, {"url": 1, "_id": 0})}
    log = site.hits(mark)
    hits = Counter(h.path for h in log if h.path != "/robots.txt")
    times = sorted(h.t for h in log)
    gap = max((b - a for a, b in zip(times, times[1:])), default=0.0)
    twice = sum(1 for n in hits.values() if n > 1)
    extra = sum(n - 1 for n in hits.values() if n > 1)
    recoveries = [k.recovered_at - k.at for k in kills if k.recovered_at]
    return {
        "variant": variant, "workers": n_workers, "pages": len(expected), "seconds": round(duration, 1),
        "kills": len(kills), "kills_that_lost_leases": sum(1 for k in kills if k.lost),
        "stored": len(stored), "lost": len(expected - stored),
        "stored_outside_site": sorted(stored - expected)[:10],
        "fetched_more_than_once": twice, "extra_fetches": extra,
        "fetched_twice_pct": round(100 * twice / len(expected), 2),
        "longest_pause_s": round(gap, 1),  # the longest time no worker fetched anything
        "lease_s": LEASE_S if variant == "distscraper" else None,
        "recovery_s_max": round(max(recoveries), 2) if recoveries else None,
        "recovery_s_median": round(statistics.median(recoveries), 2) if recoveries else None,
        "kill_log": [k.summary(t0) for k in kills], "logs": str(logs),
    }


def chaos_site(lab: Lab, pages: int) -> StaticSite:
    """A second generated site (another seed) for the chaos runs, served by nginx."""
    from distscraper.sandbox.site import SiteSpec

    site = StaticSite(SiteSpec(seed=2, pages=pages), lab.work / "chaos-site")
    site.render()
    return site.start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--variants", default="distscraper,scrapy_redis")
    parser.add_argument("--keep", action="store_true", help="keep logs and the site in the work dir")
    args = parser.parse_args()
    lab = Lab(pages=100, runs=1, quick=True, keep=args.keep).start()
    site = chaos_site(lab, args.pages)
    try:
        for variant in args.variants.split(","):
            print(json.dumps(chaos(lab, site, variant)), flush=True)
    finally:
        site.stop()
        lab.close()


if __name__ == "__main__":
    main()
