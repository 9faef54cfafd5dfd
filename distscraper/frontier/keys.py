"""Names of every Redis key a spider's frontier uses, from one template.

All keys share the prefix ``FRONTIER_KEY_PREFIX`` (default ``%(spider)s``), so
``site:start_urls``, ``site:dupefilter`` and the rest belong to spider ``site``.
Per-domain keys append the domain: ``site:requests:example.com``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: key suffix -> (Redis type, meaning); README.md lists exactly these.
KEY_DOCS: dict[str, tuple[str, str]] = {
    "start_urls": ("list", "Seeds: plain URLs or JSON objects, pushed with LPUSH by anyone."),
    "start_urls:pending": ("zset", "Seeds read by a worker but not yet in the queue (score: lease deadline, ms)."),
    "start_urls:invalid": ("list", "Rejected seeds as JSON `{seed, reason, at}`."),
    "dupefilter": ("hash", "Seen-set layout and fill (kind exact or bloom). Fingerprints live in `dupefilter:<gen>:<bucket>` hashes (exact) or `dupefilter:bloom:<i>` strings (Bloom)."),
    "requests:<domain>": ("zset", "Queued requests of one domain (JSON); score = -priority * 2^32 + sequence."),
    "domains:ready": ("zset", "Domains whose next request may start now; score = priority band, then round robin."),
    "domains:wait": ("zset", "Domains waiting for politeness (score: ms when they may go next)."),
    "inflight": ("zset", "Leased requests (JSON); score = lease deadline, ms."),
    "delayed": ("zset", "Requests waiting to be retried; score = due time, ms."),
    "dead": ("hash", "Requests that ran out of retries: fingerprint -> JSON record."),
    "quarantine": ("list", "Queue entries that could not be decoded, as JSON `{entry, reason, at}`."),
    "slots:<domain>": ("zset", "Cluster-wide download slots of one domain: the leased payloads holding them (score: expiry, ms); an expired lease frees its slot. A worker takes at most ceil(slots / live workers) of them."),
    "throttle": ("hash", "Per-domain politeness (ms): `<domain>|next` (earliest next start), `<domain>|crawl_delay`, `<domain>|penalty`, `<domain>|penalty_at`."),
    "seq": ("string", "Counter for FIFO order within a priority band and round robin between domains."),
    "stats": ("hash", "Cluster counters: pages, items, retries, dead, duplicates, ..."),
    "nodes": ("zset", "Live workers (score: last heartbeat, ms)."),
    "node:<id>": ("string", "One worker's heartbeat (JSON), expiring after HEARTBEAT_TTL."),
    "history:lock": ("string", "The node allowed to write the next history sample; expires after HEARTBEAT_INTERVAL."),
    "history": ("list", "Recent cluster samples for the dashboard's charts (JSON)."),
}


@dataclass(frozen=True)
class FrontierKeys:
    """The keys of one spider's frontier."""

    prefix: str

    @classmethod
    def for_spider(cls, spider_name: str, template: str = "%(spider)s") -> "FrontierKeys":
        return cls(template % {"spider": spider_name})

    def key(self, suffix: str) -> str:
        return f"{self.prefix}:{suffix}"

    @property
    def start_urls(self) -> str:
        return self.key("start_urls")

    @property
    def seeds_pending(self) -> str:
        return self.key("start_urls:pending")

    @property
    def seeds_invalid(self) -> str:
        return self.key("start_urls:invalid")

    @property
    def dupefilter(self) -> str:
        return self.key("dupefilter")

    @property
    def queue_prefix(self) -> str:
        return self.key("requests:")

    def queue(self, domain: str) -> str:
        return self.queue_prefix + domain

    @property
    def ready(self) -> str:
        return self.key("domains:ready")

    @property
    def wait(self) -> str:
        return self.key("domains:wait")

    @property
    def inflight(self) -> str:
        return self.key("inflight")

    @property
    def delayed(self) -> str:
        return self.key("delayed")

    @property
    def dead(self) -> str:
        return self.key("dead")

    @property
    def quarantine(self) -> str:
        return self.key("quarantine")

    @property
    def slots_prefix(self) -> str:
        return self.key("slots:")

    @property
    def throttle(self) -> str:
        return self.key("throttle")

    @property
    def seq(self) -> str:
        return self.key("seq")

    @property
    def stats(self) -> str:
        return self.key("stats")

    @property
    def nodes(self) -> str:
        return self.key("nodes")

    def node(self, node_id: str) -> str:
        return self.key(f"node:{node_id}")

    @property
    def history(self) -> str:
        return self.key("history")

    def all_patterns(self) -> list[str]:
        """Glob patterns covering every key of this frontier (for an explicit flush)."""
        return [self.prefix + ":*"]
