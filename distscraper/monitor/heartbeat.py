"""Heartbeats: each worker tells the cluster it is alive, and what it is doing.

Every ``HEARTBEAT_INTERVAL`` seconds the :class:`Heartbeat` extension sends ONE
MULTI/EXEC that

* sets ``<prefix>:node:<id>`` to this worker's JSON (host, pid, start time,
  pages, items, pages/min, per-domain pace, in flight, errors, last error),
  expiring after ``HEARTBEAT_TTL``: a killed worker disappears by itself;
* scores ``<id>`` in ``<prefix>:nodes`` with the time (ms) and drops entries
  older than the TTL from that index;
* tries ``SET <prefix>:history:lock NX PX=interval``.

The node that got the lock reads the frontier's figures and appends one sample
to ``<prefix>:history`` (LPUSH + LTRIM in one MULTI), so the cluster records one
sample per interval however many nodes run. On a clean close the node removes
its key and index entry. Redis errors are logged (once per outage) and never
stop the worker.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

import redis
from scrapy import Spider, signals
from scrapy.utils.asyncio import create_looping_call

from distscraper import defaults
from distscraper.frontier.client import Frontier
from distscraper.monitor.activity import Activity
from distscraper.monitor.figures import read_figures

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

HISTORY_LENGTH = 720


class Heartbeat:
    """The heartbeat and history writer of one worker (see module docstring)."""

    def __init__(self, crawler: "Crawler", interval: float, ttl: float) -> None:
        if ttl <= interval:
            raise ValueError(f"setting HEARTBEAT_TTL={ttl!r} must be longer than "
                             f"HEARTBEAT_INTERVAL={interval!r}")
        self.crawler = crawler
        self.interval = interval
        self.ttl = ttl
        self.activity = Activity()
        self.frontier: Frontier | None = None
        self.started = time.time()
        self.host = socket.gethostname()
        self.task: Any = None
        self._failing = False

    @classmethod
    def from_crawler(cls, crawler: "Crawler") -> "Heartbeat":
        ext = cls(crawler, defaults.get(crawler.settings, "HEARTBEAT_INTERVAL"),
                  defaults.get(crawler.settings, "HEARTBEAT_TTL"))
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.activity.response_received, signal=signals.response_received)
        crawler.signals.connect(ext.activity.spider_error, signal=signals.spider_error)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        frontier = Frontier.of(self.crawler)
        if frontier.keys is None:
            logger.warning("Heartbeat off: the scheduler is not distscraper's frontier")
            return
        self.frontier = frontier
        self.activity.capture_logs(True)
        self.task = create_looping_call(self.beat)
        self.task.start(self.interval, now=True)

    def spider_closed(self, spider: Spider, reason: str) -> None:
        self.activity.capture_logs(False)
        if self.task is not None and self.task.running:
            self.task.stop()
        if self.frontier is None or self.frontier.keys is None:
            return
        keys, node = self.frontier.keys, self.frontier.node
        try:
            pipe = self.frontier.server.pipeline(transaction=True)
            pipe.delete(keys.node(node))
            pipe.zrem(keys.nodes, node)
            pipe.execute()
        except redis.RedisError as exc:
            logger.warning("Could not remove the heartbeat of node %s: %s", node, exc)

    def state(self, now: float) -> dict[str, Any]:
        """This worker's heartbeat JSON."""
        assert self.frontier is not None
        stats = self.crawler.stats
        assert stats is not None
        return {
            "id": self.frontier.node,
            "host": self.host,
            "pid": os.getpid(),
            "started": round(self.started, 3),
            "beat": round(now, 3),
            "pages": int(stats.get_value("response_received_count", 0)),
            "items": int(stats.get_value("item_scraped_count", 0)),
            "pages_per_min": self.activity.pages_per_min(now),
            "domains": self.activity.domain_pace(now=now),
            "inflight": len(self.frontier.leases),
            "errors": self.activity.errors,
            "last_error": self.activity.last_error,
            "interval": self.interval,
            "ttl": self.ttl,
        }

    def beat(self) -> None:
        """Write the heartbeat; maybe a history sample. Never raises."""
        frontier = self.frontier
        if frontier is None or frontier.keys is None:
            return
        keys, node = frontier.keys, frontier.node
        try:
            now = time.time()
            now_ms = int(now * 1000)
            ttl_ms, interval_ms = int(self.ttl * 1000), max(int(self.interval * 1000), 1)
            pipe = frontier.server.pipeline(transaction=True)
            pipe.set(keys.node(node), json.dumps(self.state(now), separators=(",", ":")), px=ttl_ms)
            pipe.zadd(keys.nodes, {node: now_ms})
            pipe.zremrangebyscore(keys.nodes, "-inf", f"({now_ms - ttl_ms}")
            pipe.set(keys.history + ":lock", node, nx=True, px=interval_ms)
            won = pipe.execute()[-1]
            if won:
                self.write_sample()
        except redis.RedisError as exc:
            self.crawler.stats.inc_value("monitor/heartbeat_errors")
            if not self._failing:
                self._failing = True
                logger.warning("Heartbeat of node %s not sent: %s (retrying every %.1fs)",
                               node, exc, self.interval)
            return
        except Exception:  # a bug here must not stop the crawl
            logger.exception("Heartbeat of node %s failed", node)
            return
        if self._failing:
            self._failing = False
            logger.info("Heartbeat of node %s sent again", node)

    def write_sample(self) -> None:
        """Append one cluster sample to the history (only the lock's winner calls this)."""
        assert self.frontier is not None and self.frontier.keys is not None
        keys = self.frontier.keys
        figures = read_figures(self.frontier.server, keys)
        pipe = self.frontier.server.pipeline(transaction=True)
        pipe.lpush(keys.history, json.dumps(figures.sample(time.time()), separators=(",", ":")))
        pipe.ltrim(keys.history, 0, HISTORY_LENGTH - 1)
        pipe.execute()
