"""What one worker has been doing lately: pages per minute (per domain) and its last error.

:class:`Activity` only observes (signals and log records); it never touches
Redis. It guarantees:

* :meth:`pages_per_min` counts responses received in the last ``window``
  seconds (60), scaled to a minute while the worker is younger than that;
* :meth:`domain_pace` gives the same rate per domain, busiest first;
* :attr:`last_error` is the most recent of: a spider error, a retried or given
  up download, or any WARNING/ERROR log record of this process.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from typing import Any

from scrapy import Request, Spider
from scrapy.http import Response
from twisted.python.failure import Failure

from distscraper.frontier.codec import domain_of

#: Logger whose INFO records are download failures about to be retried.
RETRY_LOGGER = "distscraper.frontier.retry"
MAX_MESSAGE = 300


class Activity:
    """Per-second buckets of responses by domain, plus the last error (see module docstring)."""

    def __init__(self, window: float = 60.0, min_span: float = 5.0) -> None:
        self.window = window
        self.min_span = min_span
        self.started = time.time()
        self._buckets: deque[tuple[int, Counter[str]]] = deque()
        self.errors = 0
        self.last_error: dict[str, Any] | None = None
        self._handler = _ErrorLogHandler(self)

    # -- inputs ------------------------------------------------------------------
    def response_received(self, response: Response, request: Request, spider: Spider) -> None:
        self.count(domain_of(request))

    def spider_error(self, failure: Failure, response: Response, spider: Spider) -> None:
        # Scrapy has already logged it at ERROR (counted there): only sharpen the message.
        url = getattr(response, "url", "?")
        self.error(f"spider error on {url}: {failure.type.__name__}: {failure.value}", count=False)

    def count(self, domain: str, now: float | None = None) -> None:
        second = int(time.time() if now is None else now)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1][domain] += 1
        else:
            self._buckets.append((second, Counter({domain: 1})))
        self._expire(second)

    def error(self, message: str, at: float | None = None, count: bool = True) -> None:
        self.errors += count
        self.last_error = {"at": round(time.time() if at is None else at, 3),
                           "message": message[:MAX_MESSAGE]}

    def capture_logs(self, on: bool) -> None:
        """Start or stop watching this process's log records for errors."""
        root = logging.getLogger()
        if on:
            root.addHandler(self._handler)
        else:
            root.removeHandler(self._handler)

    # -- outputs -------------------------------------------------------------------
    def _expire(self, second: int) -> None:
        while self._buckets and self._buckets[0][0] <= second - self.window:
            self._buckets.popleft()

    def _span(self, now: float) -> float:
        return max(min(self.window, now - self.started), self.min_span)

    def pages_per_min(self, now: float | None = None) -> float:
        now = time.time() if now is None else now
        self._expire(int(now))
        total = sum(sum(c.values()) for _, c in self._buckets)
        return round(total * 60.0 / self._span(now), 1)

    def domain_pace(self, limit: int = 20, now: float | None = None) -> dict[str, float]:
        """Pages per minute of the busiest *limit* domains."""
        now = time.time() if now is None else now
        self._expire(int(now))
        total: Counter[str] = Counter()
        for _, counts in self._buckets:
            total.update(counts)
        scale = 60.0 / self._span(now)
        return {d: round(n * scale, 1) for d, n in total.most_common(limit)}


class _ErrorLogHandler(logging.Handler):
    """Feeds WARNING+ records, and the retry middleware's INFO records, to an Activity."""

    def __init__(self, activity: Activity) -> None:
        super().__init__(logging.INFO)
        self.activity = activity

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and not (
                record.name == RETRY_LOGGER and str(record.msg).startswith("Retry")):
            return
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not break logging
            message = str(record.msg)
        if record.levelno >= logging.WARNING:
            message = f"{record.levelname}: {message}"
        self.activity.error(message, at=record.created)
