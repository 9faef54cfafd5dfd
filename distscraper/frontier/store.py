"""The Redis side of the frontier: one atomic script per round trip.

:class:`FrontierStore` turns an :class:`Outbox` of buffered changes into one
``EVALSHA`` of ``lua/exchange.lua`` and returns what the worker receives.
Everything that changes shared state goes through a Lua script, so there is no
read-decide-write race between workers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import redis
from scrapy import Request, Spider

from distscraper.frontier import codec
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.priority import PriorityRules

TWO32 = 2**32


def lua(name: str) -> str:
    """The text of one of the package's Lua scripts."""
    return resources.files("distscraper.frontier").joinpath("lua", name).read_text()


#: One new request for the exchange script: fingerprint, domain, -priority * 2^32, payload, force.
Push = tuple[bytes, str, int, bytes, bool]


def push_row(request: Request, spider: Spider | None, fp: bytes, rules: PriorityRules) -> Push:
    """The queue entry of *request* (fingerprint *fp*): priority rules applied, JSON-encoded.

    Raises :class:`codec.PayloadError` if the request cannot travel as JSON.
    """
    if request.priority == 0:
        priority = rules.priority_for(request.url)
        if priority:
            request = request.replace(priority=priority)
    return (fp, codec.domain_of(request), FrontierStore.queue_score(request.priority),
            codec.encode(request, spider, fp), request.dont_filter)


@dataclass
class Outbox:
    """Changes a worker has made locally and not yet sent to Redis."""

    pushes: list[Push] = field(default_factory=list)
    acks: list[tuple[bytes, str]] = field(default_factory=list)  # payload, domain
    retries: list[tuple[bytes, bytes, int, str]] = field(default_factory=list)  # old, new, due_ms, domain
    dead: list[tuple[bytes, str, str, str]] = field(default_factory=list)  # payload, domain, fp hex, record json
    quarantine: list[tuple[bytes, str]] = field(default_factory=list)  # payload, reason
    returns: list[bytes] = field(default_factory=list)  # leases given back
    slot_releases: list[tuple[str, bytes]] = field(default_factory=list)  # domain, slot holder
    seed_acks: list[bytes] = field(default_factory=list)
    seed_invalid: list[str] = field(default_factory=list)  # record json
    slowdowns: list[str] = field(default_factory=list)  # domain
    crawl_delays: list[tuple[str, int]] = field(default_factory=list)  # domain, ms
    counters: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(getattr(self, name)) for name in self._LISTS) + len(self.counters)

    _LISTS = ("pushes", "acks", "retries", "dead", "quarantine", "returns", "slot_releases",
              "seed_acks", "seed_invalid", "slowdowns", "crawl_delays")

    def take(self) -> "Outbox":
        """Move every change into a new outbox (to send), leaving this one empty."""
        taken = Outbox()
        for name in self._LISTS:
            setattr(taken, name, getattr(self, name))
            setattr(self, name, [])
        taken.counters, self.counters = self.counters, {}
        return taken

    def put_back(self, unsent: "Outbox") -> None:
        """Restore changes that could not be sent, before any made since."""
        for name in self._LISTS:
            setattr(self, name, getattr(unsent, name) + getattr(self, name))
        for key, n in unsent.counters.items():
            self.count(key, n)

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def args(self) -> list[Any]:
        out: list[Any] = []

        def section(rows: list[Any], width: int) -> None:
            out.append(len(rows))
            for row in rows:
                if width == 1:
                    out.append(row)
                else:
                    out.extend(row)

        section([(fp, b"%d%d %s\n%s" % (force, base, d.encode(), p))
                 for fp, d, base, p, force in self.pushes], 2)
        section(self.acks, 2)
        section(self.retries, 4)
        section(self.dead, 4)
        section(self.quarantine, 2)
        section(self.returns, 1)
        section(self.slot_releases, 2)
        section(self.seed_acks, 1)
        section(self.seed_invalid, 1)
        section(self.slowdowns, 1)
        section(self.crawl_delays, 2)
        section(list(self.counters.items()), 2)
        return out


@dataclass(frozen=True)
class ExchangeParams:
    """Per-worker constants of every exchange."""

    node: str
    lease_ms: int
    delay_ms: int = 0
    concurrency: int = 0
    slot_ttl_ms: int = 60_000
    reap_batch: int = 200
    recover_ms: int = 10_000
    penalty_base_ms: int = 1_000
    penalty_max_ms: int = 60_000


@dataclass
class ExchangeResult:
    popped: list[tuple[bytes, bytes, str]]  # payload, slot holder (b"" if none), the queue's domain
    seeds: list[bytes]
    new: int
    duplicates: int
    reaped: int
    work: int  # seeds + queued domains + in flight + delayed, cluster-wide
    wake_ms: int  # ms until the next domain is due (-1: none waiting)


class FrontierStore:
    """Atomic operations on one spider's frontier keys."""

    def __init__(self, server: redis.Redis, keys: FrontierKeys, dedup_prelude: str) -> None:
        self.server = server
        self.keys = keys
        self._exchange = server.register_script(dedup_prelude + "\n" + lua("exchange.lua"))
        self._renew = server.register_script(lua("renew.lua"))

    def exchange(self, outbox: Outbox, params: ExchangeParams, *, pop: int = 0,
                 seeds: int = 0, slots_held: dict[str, int] | None = None) -> ExchangeResult:
        """Send *outbox*, lease up to *pop* requests and read up to *seeds* seeds, atomically.

        *slots_held* (domain -> slots this worker's leases hold) keeps the worker to its
        share of each domain's cluster-wide slots: ceil(slots / live workers).
        """
        held = list((slots_held or {}).items())
        argv = [self.keys.prefix + ":", params.lease_ms, params.node, pop,
                params.delay_ms, params.concurrency, params.slot_ttl_ms, params.reap_batch, seeds,
                params.recover_ms, params.penalty_base_ms, params.penalty_max_ms, *outbox.args(),
                len(held), *(x for row in held for x in row)]
        popped, seed_list, new, dups, reaped, work, wake = self._exchange(args=argv)
        triples = [(popped[i], popped[i] if popped[i + 1] == b"1" else b"", popped[i + 2].decode())
                   for i in range(0, len(popped), 3)]
        return ExchangeResult(triples, list(seed_list), int(new), int(dups), int(reaped),
                              int(work), int(wake))

    def renew(self, payloads: list[bytes], lease_ms: int) -> int:
        if not payloads:
            return 0
        return int(self._renew(keys=[self.keys.inflight], args=[lease_ms, *payloads]))

    @staticmethod
    def queue_score(priority: int) -> int:
        """The priority part of a queue score; lower scores are served first."""
        return -int(priority) * TWO32

    @staticmethod
    def record(**fields: Any) -> str:
        return json.dumps(fields, separators=(",", ":"), default=str)
