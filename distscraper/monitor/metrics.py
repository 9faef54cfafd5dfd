"""Opt-in Prometheus metrics of one worker, at ``http://METRICS_HOST:METRICS_PORT/metrics``.

The :class:`Metrics` extension is off unless ``METRICS_PORT`` > 0. It serves
the Prometheus text exposition format (version 0.0.4, written here: no client
library) from a daemon thread, so a slow scrape never blocks the crawl:

* worker counters from this process's crawl stats: pages, items, retries,
  errors; the in-flight gauge (leases this worker holds);
* cluster gauges read from Redis at scrape time (read-only): queued, in flight,
  delayed, dead, live nodes; ``distscraper_cluster_up`` is 0 when Redis did
  not answer (the cluster gauges are then left out).

If the port is taken (two workers on one host need two ports) the error is
logged and the worker crawls on without metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import redis
from scrapy import Spider, signals
from scrapy.exceptions import NotConfigured

from distscraper import defaults
from distscraper.frontier.client import Frontier
from distscraper.frontier.connection import redis_from_settings
from distscraper.monitor.figures import read_figures

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: name -> (type, help, crawl stat it reads, or None for values computed below)
WORKER_METRICS: dict[str, tuple[str, str, str | None]] = {
    "distscraper_worker_pages_total": ("counter", "Responses this worker received.", "response_received_count"),
    "distscraper_worker_items_total": ("counter", "Items this worker scraped.", "item_scraped_count"),
    "distscraper_worker_retries_total": ("counter", "Downloads this worker sent to the retry queue.", "retry/count"),
    "distscraper_worker_errors_total": ("counter", "Errors logged by this worker.", "log_count/ERROR"),
    "distscraper_worker_inflight": ("gauge", "Requests this worker holds leased.", None),
}
CLUSTER_METRICS: dict[str, tuple[str, str]] = {
    "distscraper_cluster_queued": ("gauge", "Requests waiting in the shared queue."),
    "distscraper_cluster_inflight": ("gauge", "Requests leased by any worker."),
    "distscraper_cluster_delayed": ("gauge", "Requests waiting for a retry."),
    "distscraper_cluster_dead": ("gauge", "Requests that ran out of retries."),
    "distscraper_cluster_nodes": ("gauge", "Workers with a live heartbeat."),
}


def label_value(text: str) -> str:
    """Escape a label value for the exposition format."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(samples: list[tuple[str, str, str, float]], labels: dict[str, str]) -> str:
    """Render ``(name, type, help, value)`` samples with the same labels."""
    lab = ",".join(f'{k}="{label_value(v)}"' for k, v in labels.items())
    out = []
    for name, kind, text, value in samples:
        number = str(int(value)) if float(value).is_integer() else repr(float(value))
        out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name}{{{lab}}} {number}"]
    return "\n".join(out) + "\n"


class Metrics:
    """Serves /metrics for one worker (see module docstring)."""

    def __init__(self, crawler: "Crawler", host: str, port: int) -> None:
        self.crawler = crawler
        self.host = host
        self.port = port
        self.frontier: Frontier | None = None
        self.server: ThreadingHTTPServer | None = None
        self.redis = redis_from_settings(crawler.settings)  # its own pool: used from HTTP threads

    @classmethod
    def from_crawler(cls, crawler: "Crawler") -> "Metrics":
        port = defaults.get(crawler.settings, "METRICS_PORT")
        if port <= 0:
            raise NotConfigured  # opt-in, like Scrapy's MEMDEBUG: no warning on every start
        ext = cls(crawler, defaults.get(crawler.settings, "METRICS_HOST"), port)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        self.frontier = Frontier.of(self.crawler)
        handler = type("Handler", (_Handler,), {"metrics": self})
        try:
            self.server = ThreadingHTTPServer((self.host, self.port), handler)
        except OSError as exc:
            logger.error("Metrics off: cannot listen on %s:%d: %s", self.host, self.port, exc)
            return
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True).start()
        logger.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        self.redis.close()

    def render(self) -> str:
        """The exposition text (runs in an HTTP thread)."""
        stats = self.crawler.stats
        frontier = self.frontier
        samples: list[tuple[str, str, str, float]] = []
        for name, (kind, text, stat) in WORKER_METRICS.items():
            if stat is None:
                value = len(frontier.leases) if frontier else 0
            else:
                value = stats.get_value(stat, 0) if stats else 0
            samples.append((name, kind, text, float(value)))
        up = 0.0
        keys = frontier.keys if frontier else None
        if keys is not None:
            try:
                fig = read_figures(self.redis, keys, nodes_since_ms=int((time.time() - 3600) * 1000))
                live = sum(1 for raw in self.redis.mget([keys.node(n) for n in fig.node_ids])
                           if raw is not None) if fig.node_ids else 0
                values = [fig.queued, fig.inflight, fig.delayed, fig.dead, live]
                samples += [(n, k, t, float(v)) for (n, (k, t)), v in zip(CLUSTER_METRICS.items(), values)]
                up = 1.0
            except redis.RedisError as exc:
                logger.debug("metrics: Redis unreadable: %s", exc)
        samples.append(("distscraper_cluster_up", "gauge", "1 if Redis answered this scrape.", up))
        node = frontier.node if frontier else ""
        return exposition(samples, {"node": node, "frontier": keys.prefix if keys else ""})


class _Handler(BaseHTTPRequestHandler):
    metrics: Metrics

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404)
            return
        body = self.metrics.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return
