"""`make demo`: a whole distributed crawl on one machine.

Starts an embedded Redis and a MongoDB-wire server on loopback (unless
REDIS_URL / MONGO_URI are set), serves a generated site, starts 3
`scrapy crawl site` workers, seeds them with `redis-cli lpush`, shows live
progress, prints a summary, and stops everything it started, by PID.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import pymongo
import redis

from distscraper.frontier.keys import FrontierKeys
from distscraper.monitor.figures import read_figures
from distscraper.sandbox.servers import (MongoServer, RedisServer, mongo_uri_from_env,
                                         redis_url_from_env, stop_process)
from distscraper.sandbox.site import SiteServer, SiteSpec

REPO_ROOT = Path(__file__).resolve().parents[2]


def redis_cli() -> str:
    local = Path(sys.executable).parent / "redis-cli"
    return str(local) if local.exists() else (shutil.which("redis-cli") or "redis-cli")


def start_worker(n: int, env: dict[str, str], settings: dict[str, str], log_dir: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "scrapy", "crawl", "site"]
    for name, value in settings.items():
        args += ["-s", f"{name}={value}"]
    args += ["-s", f"LOG_FILE={log_dir / f'worker-{n}.log'}"]
    return subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(log_dir / f"worker-{n}.err", "wb"), start_new_session=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1500, help="detail pages of the generated site")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    opts = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="distscraper-demo-"))
    started = time.monotonic()
    with ExitStack() as stack:
        redis_url = redis_url_from_env()
        mongo_uri = mongo_uri_from_env()
        external = bool(redis_url or mongo_uri)
        if not redis_url:
            redis_url = stack.enter_context(RedisServer(data_dir=work / "redis")).url
        if not mongo_uri:
            mongo_uri = stack.enter_context(MongoServer(storage=work / "mongo")).uri
        prefix = f"demo{int(time.time())}" if external else "site"
        database = prefix if external else "distscraper"
        site = SiteServer(SiteSpec(pages=opts.pages), hits_path=work / "hits.jsonl").start()
        stack.callback(site.stop)
        print(f"Redis {redis_url}  MongoDB {mongo_uri}  site {site.base_url}  logs {work}")

        env = dict(os.environ, REDIS_URL=redis_url, MONGO_URI=mongo_uri, PYTHONPATH=str(REPO_ROOT))
        settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": "5", "FRONTIER_KEY_PREFIX": prefix,
                    "MONGO_DATABASE": database, "LOG_LEVEL": "INFO"}
        workers = [start_worker(n, env, settings, work) for n in range(1, opts.workers + 1)]
        for proc in workers:
            stack.callback(stop_process, proc)
        keys = FrontierKeys(prefix)
        seed_cmd = [redis_cli(), "-u", redis_url, "lpush", keys.start_urls, site.url("/")]
        print("$", " ".join(seed_cmd))
        subprocess.run(seed_cmd, check=True, stdout=subprocess.DEVNULL)

        server = redis.Redis.from_url(redis_url)
        docs = pymongo.MongoClient(mongo_uri)[database]["site"]
        deadline = time.monotonic() + opts.timeout
        while any(p.poll() is None for p in workers) and time.monotonic() < deadline:
            snap = read_figures(server, keys)
            elapsed = time.monotonic() - started
            done = snap.counters.get("done", 0)
            print(f"\r{elapsed:6.1f}s  queued {snap.queued:6d}  in flight {snap.inflight:4d}  "
                  f"done {done:6d}  retries {snap.delayed:3d}  dead {snap.dead:3d}  "
                  f"documents {docs.estimated_document_count():6d}  workers "
                  f"{sum(p.poll() is None for p in workers)}", end="", flush=True)
            time.sleep(1)
        print()

        elapsed = time.monotonic() - started
        hits = Counter(h["path"] for h in site.hits() if h["path"] != "/robots.txt")
        expected = site.spec.expected_urls(site.base_url)
        stored = {d["url"] for d in docs.find({}, {"url": 1})}
        twice = sum(1 for n in hits.values() if n > 1)
        print(f"pages fetched      {sum(hits.values())}\n"
              f"distinct pages     {len(hits)} (expected {len(expected)})\n"
              f"fetched twice      {twice}\n"
              f"documents stored   {len(stored)} (missing {len(expected - stored)})\n"
              f"duplicates filtered {read_figures(server, keys).counters.get('duplicates', 0)}\n"
              f"time               {elapsed:.1f}s")
        ok = stored >= expected and all(p.poll() == 0 for p in workers)
        print("OK: every page stored once" if ok else f"PROBLEM: see the worker logs in {work}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
