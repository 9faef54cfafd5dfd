"""The Scrapy scheduler of a distscraper worker: scrapy-redis's, on a leased frontier.

Differences from ``scrapy_redis.scheduler.Scheduler``, all deliberate:

* requests travel as JSON (no pickle) and are *leased*, not deleted, on pop;
* pushes, pops and acks are batched into one Lua round trip;
* closing a worker never deletes the shared queue or seen-set
  (``SCHEDULER_PERSIST`` is always on; flushing is explicit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import Request, Spider
from scrapy_redis.scheduler import Scheduler

from distscraper.frontier.client import Frontier

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class DistributedScheduler(Scheduler):
    """Hands out leased requests from the shared frontier (see module docstring)."""

    def __init__(self, frontier: Frontier, crawler: "Crawler") -> None:
        super().__init__(server=frontier.server, persist=True, dupefilter=frontier.dupefilter)
        self.frontier = frontier
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: "Crawler") -> "DistributedScheduler":
        return cls(Frontier.of(crawler), crawler)

    def open(self, spider: Spider) -> None:
        self.spider = spider
        self.frontier.open(spider)

    def close(self, reason: str) -> None:
        self.frontier.close()

    def flush(self) -> None:
        self.frontier.flush_all_keys()

    def __len__(self) -> int:
        return len(self.frontier.ready)

    def enqueue_request(self, request: Request) -> bool:
        self.frontier.push(request)
        if self.stats:
            self.stats.inc_value("scheduler/enqueued/redis")
        return True

    def next_request(self) -> Request | None:
        request = self.frontier.pop()
        if request is not None and self.stats:
            self.stats.inc_value("scheduler/dequeued/redis")
        return request

    def has_pending_requests(self) -> bool:
        return bool(self.frontier.ready)
