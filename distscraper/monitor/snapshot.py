"""A read-only snapshot of one frontier's figures. Reading never changes the crawl."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from distscraper.frontier.keys import FrontierKeys


@dataclass
class FrontierSnapshot:
    taken_at: float
    seeds: int  # waiting in start_urls
    seeds_pending: int
    seeds_invalid: int
    queued: int
    inflight: int
    delayed: int
    dead: int
    quarantined: int
    seen: int
    domains_ready: int
    domains_waiting: int
    counters: dict[str, int] = field(default_factory=dict)
    queued_by_domain: dict[str, int] = field(default_factory=dict)

    @property
    def work(self) -> int:
        """Everything not finished yet, cluster-wide."""
        return self.seeds + self.seeds_pending + self.queued + self.inflight + self.delayed

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["work"] = self.work
        return out


def _domains(server: redis.Redis, keys: FrontierKeys) -> list[str]:
    prefix = keys.queue_prefix.encode()
    return sorted({k[len(prefix):].decode() for k in server.scan_iter(match=keys.queue_prefix + "*", count=1000)})


def take_snapshot(server: redis.Redis, keys: FrontierKeys) -> FrontierSnapshot:
    """Read the frontier's keys in one pipeline (plus a SCAN for the domain queues)."""
    domains = _domains(server, keys)
    pipe = server.pipeline(transaction=False)
    pipe.llen(keys.start_urls)
    pipe.zcard(keys.seeds_pending)
    pipe.llen(keys.seeds_invalid)
    pipe.zcard(keys.inflight)
    pipe.zcard(keys.delayed)
    pipe.hlen(keys.dead)
    pipe.llen(keys.quarantine)
    pipe.type(keys.dupefilter)
    pipe.zcard(keys.ready)
    pipe.zcard(keys.wait)
    pipe.hgetall(keys.stats)
    for domain in domains:
        pipe.zcard(keys.queue(domain))
    (seeds, pending, invalid, inflight, delayed, dead, quarantined, df_type, ready, waiting,
     counters, *depths) = pipe.execute()
    seen = server.scard(keys.dupefilter) if df_type == b"set" else int(counters.get(b"seen", counters.get(b"enqueued", 0)))
    by_domain = {d: int(n) for d, n in zip(domains, depths) if n}
    return FrontierSnapshot(
        taken_at=time.time(), seeds=seeds, seeds_pending=pending, seeds_invalid=invalid,
        queued=sum(by_domain.values()), inflight=inflight, delayed=delayed, dead=dead,
        quarantined=quarantined, seen=seen, domains_ready=ready, domains_waiting=waiting,
        counters={k.decode(): int(v) for k, v in counters.items()}, queued_by_domain=by_domain)
