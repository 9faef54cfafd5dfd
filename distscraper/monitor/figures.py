"""The frontier's figures, read from Redis in one MULTI/EXEC: a consistent, read-only view.

:func:`read_figures` never writes. Because every count comes from the same
transaction, a request moving from the queue to in flight is counted once.
Queue depth is split in priority bands by ``ZCOUNT`` on each domain queue,
whose score is ``-priority * 2**32 + sequence`` (see ``frontier/keys.py``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from distscraper.frontier.keys import FrontierKeys

TWO32 = 2**32

#: (band, ZCOUNT min, ZCOUNT max): priority >= 10, 1..9, 0, < 0.
BANDS: tuple[tuple[str, str, str], ...] = (
    ("urgent", "-inf", f"({-9 * TWO32}"),
    ("high", str(-9 * TWO32), "(0"),
    ("normal", "0", f"({TWO32}"),
    ("low", str(TWO32), "+inf"),
)
#: History samples read to work out the last minute's rate (covers 60 s at 0.2 s beats).
HISTORY_READ = 300


@dataclass
class Figures:
    """Counts of one frontier at one instant."""

    queued: int = 0
    bands: dict[str, int] = field(default_factory=lambda: {b[0]: 0 for b in BANDS})
    by_domain: dict[str, int] = field(default_factory=dict)
    inflight: int = 0
    delayed: int = 0
    dead: int = 0
    seen: int = 0
    seeds: int = 0
    seeds_pending: int = 0
    invalid_seeds: int = 0
    quarantined: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    node_ids: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)  # oldest first

    @property
    def done(self) -> int:
        return self.counters.get("done", 0)

    @property
    def errors(self) -> int:
        """Failed attempts, cluster-wide: retries plus dead letters."""
        return self.counters.get("retries", 0) + self.counters.get("dead", 0)

    def sample(self, t: float) -> dict[str, Any]:
        """One entry of ``<prefix>:history``."""
        return {"t": round(t, 3), "done": self.done, "queued": self.queued,
                "inflight": self.inflight, "delayed": self.delayed, "dead": self.dead,
                "errors": self.errors}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def queue_domains(server: redis.Redis, keys: FrontierKeys) -> list[str]:
    """Domains that have a queue key (SCAN: never blocks the server)."""
    prefix = keys.queue_prefix.encode()
    found = {k[len(prefix):].decode("utf-8", "replace")
             for k in server.scan_iter(match=keys.queue_prefix + "*", count=1000)}
    return sorted(found)


def read_figures(server: redis.Redis, keys: FrontierKeys, *, nodes_since_ms: int | None = None,
                 history: bool = False) -> Figures:
    """Read the figures; with *nodes_since_ms*, also the node ids that beat since then."""
    domains = queue_domains(server, keys)
    pipe = server.pipeline(transaction=True)
    pipe.llen(keys.start_urls)
    pipe.zcard(keys.seeds_pending)
    pipe.llen(keys.seeds_invalid)
    pipe.zcard(keys.inflight)
    pipe.zcard(keys.delayed)
    pipe.hlen(keys.dead)
    pipe.llen(keys.quarantine)
    pipe.scard(keys.dupefilter)  # only an old-style SET seen-set answers; errors are handled below
    pipe.hgetall(keys.stats)
    if nodes_since_ms is not None:
        pipe.zrangebyscore(keys.nodes, nodes_since_ms, "+inf")
    else:
        pipe.echo(b"")
    if history:
        pipe.lrange(keys.history, 0, HISTORY_READ - 1)
    else:
        pipe.echo(b"")
    for domain in domains:
        for _, low, high in BANDS:
            pipe.zcount(keys.queue(domain), low, high)
    replies = pipe.execute(raise_on_error=False)
    seeds, pending, invalid, inflight, delayed, dead, quarantined, seen, stats, nodes, hist = replies[:11]
    for reply in replies:
        if isinstance(reply, Exception) and reply is not seen:
            raise reply
    counters = {k.decode(): int(v) for k, v in stats.items()}
    if isinstance(seen, Exception) or not seen:
        # Not a plain SET (sharded hashes, Bloom): the seen-set counts new fingerprints in
        # stats `seen`; older frontiers only counted what they enqueued.
        seen = counters.get("seen", counters.get("enqueued", 0))
    figures = Figures(inflight=inflight, delayed=delayed, dead=dead, seen=int(seen), seeds=seeds,
                      seeds_pending=pending, invalid_seeds=invalid, quarantined=quarantined,
                      counters=counters)
    if nodes_since_ms is not None:
        figures.node_ids = [n.decode("utf-8", "replace") for n in nodes]
    counts = replies[11:]
    for i, domain in enumerate(domains):
        depth = 0
        for j, (band, _, _) in enumerate(BANDS):
            n = int(counts[i * len(BANDS) + j])
            figures.bands[band] += n
            depth += n
        if depth:
            figures.by_domain[domain] = depth
    figures.queued = sum(figures.bands.values())
    if history:
        figures.history = parse_samples(hist)
    return figures


def read_history(server: redis.Redis, keys: FrontierKeys, limit: int = 720) -> list[dict[str, Any]]:
    """The newest *limit* cluster samples, oldest first."""
    return parse_samples(server.lrange(keys.history, 0, limit - 1))


def parse_samples(raw: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for entry in raw:
        try:
            sample = json.loads(entry)
        except ValueError:
            continue
        if isinstance(sample, dict) and isinstance(sample.get("t"), (int, float)):
            out.append(sample)
    out.sort(key=lambda s: s["t"])
    return out
