"""Frontier capacity: pages/s one Redis sustains for simulated workers, no HTTP at all.

Each of N processes loops as a real worker does, through the real
:meth:`FrontierStore.exchange` (the same Lua script and dupefilter): lease up
to 16 requests, and in the next exchange push ``links`` links found on each of
them (``new`` of which were never seen; the rest are recent duplicates) through
the dupefilter, ack them and release their politeness slots. Payloads are the
real JSON of :func:`codec.encode` for one Scrapy Request per domain, built
once, with the page number and the 16-byte fingerprint substituted per link,
all generated before the clock starts, so the simulated workers cost little.

Reported: pages (acks) per second summed over the processes, exchanges/s,
Redis CPU (INFO, share of one core) and Redis CPU ms per page; when Redis is
not saturated (the 2 cores are shared with the simulated workers) the pages/s
one Redis core could sustain is ``1000 / redis_cpu_ms_per_page``.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import time
from typing import Any

import redis
from scrapy import Request

from distscraper.frontier import codec
from distscraper.frontier.dupefilter import RedisDupeFilter
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.store import ExchangeParams, FrontierStore, Outbox

DOMAINS = 100
POP = 16
PREFIX = "cap"
ZERO_FP = b"0" * 32


class Links:
    """Pre-generated link payloads of one process: ``(fp, domain, payload)``."""

    def __init__(self, proc: int, count: int) -> None:
        templates = [codec.encode(Request(f"http://d{d}.bench.test/p/__N__"), None, b"\0" * 16)
                     for d in range(DOMAINS)]
        self.items: list[tuple[bytes, str, bytes]] = []
        for n in range(count):
            d = n % DOMAINS
            page = b"%d-%d" % (proc, n)
            fp = hashlib.blake2b(page, digest_size=16).digest()
            payload = templates[d].replace(b"__N__", page).replace(ZERO_FP, fp.hex().encode())
            self.items.append((fp, f"d{d}.bench.test", payload))
        self.next = 0

    def new(self) -> tuple[bytes, str, bytes]:
        item = self.items[self.next % len(self.items)]
        self.next += 1
        return item

    def seen(self, back: int) -> tuple[bytes, str, bytes]:
        return self.items[max(0, self.next - 1 - back) % len(self.items)]


def _store(redis_url: str) -> FrontierStore:
    server = redis.Redis.from_url(redis_url)
    keys = FrontierKeys(PREFIX)
    return FrontierStore(server, keys, RedisDupeFilter(server, keys.dupefilter).lua_prelude())


def _params(node: str) -> ExchangeParams:
    return ExchangeParams(node=node, lease_ms=600_000, concurrency=8)


def _worker(proc: int, redis_url: str, seconds: float, links: int, new: int, budget: int,
            ready: Any, go: Any, out: Any) -> None:
    store = _store(redis_url)
    params = _params(f"sim{proc}")
    gen = Links(proc, budget)
    held: list[tuple[bytes, str, str]] = []
    pages = exchanges = 0
    ready.put(proc)
    go.wait()
    end = time.time() + seconds
    while time.time() < end:
        box = Outbox()
        for payload, token, domain in held:
            for j in range(links):
                fp, d, link = gen.new() if j < new else gen.seen(j * 7)
                box.pushes.append((fp, d, 0, link, False))
            box.acks.append((payload, domain))
            if token:
                box.slot_releases.append((domain, token))
        result = store.exchange(box, params, pop=POP)
        exchanges += 1
        pages += len(held)
        held = result.popped
    out.put({"pages": pages, "exchanges": exchanges, "wrapped": gen.next > len(gen.items)})


def fill(redis_url: str, count: int) -> None:
    """Queue *count* requests over the domains, so the workers never start empty."""
    store = _store(redis_url)
    gen = Links(999, count)
    for start in range(0, count, 2000):
        box = Outbox()
        box.pushes = [(fp, d, 0, p, False) for fp, d, p in gen.items[start:start + 2000]]
        store.exchange(box, _params("filler"))


def run(redis_url: str, *, processes: int = 4, seconds: float = 8.0, links: int = 10,
        new: int = 1, runs: int = 3) -> list[dict[str, Any]]:
    """Measure *runs* times on an emptied Redis; returns one dict per run."""
    client = redis.Redis.from_url(redis_url)
    ctx = mp.get_context("spawn")
    results = []
    budget = int(4000 * seconds * max(new, 1) / processes) + 10_000
    for _ in range(runs):
        client.flushall()
        fill(redis_url, 20_000)
        out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=_worker, args=(i, redis_url, seconds, links, new, budget,
                                                    ready, go, out)) for i in range(processes)]
        for p in procs:
            p.start()
        for _ in procs:  # every process has generated its links
            ready.get(timeout=120)
        cpu0 = _redis_cpu(client)
        go.set()
        time.sleep(seconds)
        cpu1 = _redis_cpu(client)
        parts = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(10)
        pages = sum(p["pages"] for p in parts)
        redis_cpu = cpu1 - cpu0
        results.append({
            "pages_per_s": round(pages / seconds),
            "exchanges_per_s": round(sum(p["exchanges"] for p in parts) / seconds),
            "redis_cpu_share": round(redis_cpu / seconds, 2),
            "redis_cpu_ms_per_page": round(1000 * redis_cpu / max(pages, 1), 4),
            "one_core_pages_per_s": round(pages / redis_cpu) if redis_cpu else None,
            "queued_at_end": _queued(client),
            "links_wrapped": any(p["wrapped"] for p in parts),
        })
    client.flushall()
    client.close()
    return results


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"] + info["used_cpu_sys"])


def _queued(client: redis.Redis) -> int:
    return sum(int(client.zcard(k)) for k in client.scan_iter(match=f"{PREFIX}:requests:*", count=1000))


def main() -> None:
    """``python -m benchmarks.capacity [seconds]``: one quick run on an embedded Redis."""
    import sys

    from distscraper.sandbox.servers import RedisServer

    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    with RedisServer() as server:
        for new in (1, 10):
            print(f"10 links/page, {new} new:", run(server.url, seconds=seconds, new=new, runs=1))


if __name__ == "__main__":
    main()
