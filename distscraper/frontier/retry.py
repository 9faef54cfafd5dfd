"""Retries held in Redis, with back-off, and dead letters. Replaces Scrapy's RetryMiddleware.

For a leased request that fails:

* a retryable failure (``RETRY_EXCEPTIONS``, ``RETRY_HTTP_CODES``) moves the
  lease to ``<spider>:delayed`` with a due time of
  ``min(RETRY_BACKOFF_BASE * 2**attempt, RETRY_BACKOFF_MAX)`` spread by
  ``RETRY_JITTER``, or ``Retry-After`` when the server sent one. Any node runs
  the retry when it is due; a worker that dies does not lose it.
* a failure after ``RETRY_TIMES`` retries, or one that is not retryable, moves
  the lease to ``<spider>:dead`` with the URL, last error, attempts, first and
  last attempt time and node.
* ``IgnoreRequest`` (robots.txt, offsite, redirect limits) acknowledges it.

A 429 or 503 also slows the domain down for the whole cluster.
Every outcome is counted in the crawl stats. Nothing is silently dropped.

Exceptions raised in another middleware's ``process_response`` (RedirectMiddleware's
"max redirections reached", HttpCompressionMiddleware's size limit) never reach
``process_exception``; they reach the request's errback. So every leased request
gets the spider's ``download_failed`` errback when it has none, and that
errback calls :func:`settle_failure`, which ends the lease the same way.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.utils.misc import load_object

from distscraper import defaults
from distscraper.frontier import codec
from distscraper.frontier.client import Frontier
from distscraper.frontier.store import FrontierStore

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

SLOWDOWN_CODES = (429, 503)
#: The spider method that :meth:`FrontierRetryMiddleware.process_request` makes the errback.
ERRBACK = "download_failed"

_MIDDLEWARES: "WeakKeyDictionary[Crawler, FrontierRetryMiddleware]" = WeakKeyDictionary()


def backoff_delay(attempt: int, base: float, cap: float, jitter: float,
                  rng: random.Random | None = None) -> float:
    """Seconds before retry number *attempt* (1 for the first retry)."""
    delay = min(base * 2 ** max(attempt - 1, 0), cap)
    if jitter:
        delay *= 1 + (rng or random).uniform(-jitter, jitter)
    return max(delay, 0.0)


def retry_after_seconds(value: bytes | str | None, now: float | None = None) -> float | None:
    """Parse a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None
    return max(when - (now if now is not None else time.time()), 0.0)


class FrontierRetryMiddleware:
    """Downloader middleware that ends every failed lease as a retry, a dead letter or an ack."""

    def __init__(self, crawler: "Crawler", frontier: Frontier) -> None:
        settings = crawler.settings
        self.frontier = frontier
        self.stats = crawler.stats
        self.enabled = settings.getbool("RETRY_ENABLED")
        self.max_retries = settings.getint("RETRY_TIMES")
        self.http_codes = {int(x) for x in settings.getlist("RETRY_HTTP_CODES")}
        self.exceptions = tuple(load_object(x) if isinstance(x, str) else x
                                for x in settings.getlist("RETRY_EXCEPTIONS"))
        self.base = defaults.get(settings, "RETRY_BACKOFF_BASE")
        self.cap = defaults.get(settings, "RETRY_BACKOFF_MAX")
        self.jitter = defaults.get(settings, "RETRY_JITTER")

    @classmethod
    def from_crawler(cls, crawler: "Crawler") -> "FrontierRetryMiddleware":
        mw = cls(crawler, Frontier.of(crawler))
        _MIDDLEWARES[crawler] = mw
        return mw

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        """Give a leased request without an errback the spider's ``download_failed``."""
        if request.errback is None and self.frontier.leases.of(request)[0] is not None:
            request.errback = getattr(self.frontier.spider, ERRBACK, None)
        return None

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Response:
        if response.status in SLOWDOWN_CODES and not request.meta.get("dont_retry"):
            self.frontier.slowdown(codec.domain_of(request))
        if response.status in self.http_codes and not request.meta.get("dont_retry"):
            retry_after = retry_after_seconds(response.headers.get(b"Retry-After"))
            if self._fail(request, f"HTTP {response.status}", retryable=True, retry_after=retry_after):
                raise IgnoreRequest(f"HTTP {response.status}: handed to the frontier")
        return response

    def process_exception(self, request: Request, exception: Exception,
                          spider: Spider | None = None) -> None:
        if self.settle(request, exception) and not isinstance(exception, IgnoreRequest):
            raise IgnoreRequest(f"{_reason(exception)}: handed to the frontier")
        return None

    def settle(self, request: Request, exception: BaseException) -> bool:
        """End the lease of a failed request: ack an IgnoreRequest, else retry or dead-letter.

        False (and nothing done) if the request is not leased (any more).
        """
        if isinstance(exception, IgnoreRequest):
            return _ack_ignored(self.frontier, request, exception)
        retryable = isinstance(exception, self.exceptions) and not request.meta.get("dont_retry")
        return self._fail(request, _reason(exception), retryable=retryable)

    def _fail(self, request: Request, reason: str, *, retryable: bool,
              retry_after: float | None = None) -> bool:
        """End the lease as a retry or a dead letter. False if the request is not leased."""
        lease_id, lease = self.frontier.leases.of(request)
        if lease is None:
            return False
        info = codec.loads(lease.payload)
        attempt = int(info.get("n", 0)) + 1
        now = time.time()
        first = float(info.get("t0", now))
        limit = int(request.meta.get("max_retry_times", self.max_retries)) if self.enabled else 0
        if retryable and attempt <= limit:
            delay = backoff_delay(attempt, self.base, self.cap, self.jitter)
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.cap))
            self.stats.inc_value("retry/count")
            self.stats.inc_value(f"retry/reason_count/{reason.split(':')[0]}")
            logger.info("Retry %d/%d of %s in %.1fs (%s)", attempt, limit, request.url, delay, reason)
            self.frontier.leases.finalize(lease_id, "retry",
                                   new_payload=codec.with_attempt(lease.payload, attempt, first),
                                   due_ms=int((now + delay) * 1000))
        else:
            self.stats.inc_value("retry/max_reached" if retryable else "frontier/failed")
            self.stats.inc_value(f"frontier/dead/{reason.split(':')[0]}")
            logger.error("Gave up on %s after %d attempt(s): %s", request.url, attempt, reason)
            record = FrontierStore.record(
                url=request.url, error=reason, attempts=attempt, first_attempt=first,
                last_attempt=now, node=self.frontier.node, payload=lease.payload.decode())
            self.frontier.leases.finalize(lease_id, "dead", fingerprint=str(info.get("f", "")), record=record)
        return True


def settle_failure(crawler: "Crawler", request: Request, exception: BaseException) -> bool:
    """End the lease of *request* after a failure that reached its errback.

    Uses the crawler's FrontierRetryMiddleware; without one the lease is
    acknowledged (counted as ``frontier/ignored/<reason>``) so it never hangs.
    """
    mw = _MIDDLEWARES.get(crawler)
    if mw is not None:
        return mw.settle(request, exception)
    return _ack_ignored(Frontier.of(crawler), request, exception)


def _ack_ignored(frontier: Frontier, request: Request, exception: BaseException) -> bool:
    """Acknowledge a request that will not be fetched (robots.txt, offsite, limits)."""
    if not frontier.leases.end(request, "ack"):
        return False
    frontier.stats.inc_value(f"frontier/ignored/{_ignore_reason(exception)}")
    logger.debug("Ignored %s: %s", request.url, exception)
    return True


def _reason(exception: BaseException) -> str:
    return f"{type(exception).__name__}: {exception}".strip(": ")


def _ignore_reason(exception: BaseException) -> str:
    """A short stats-key reason: the message when it is short and names no URL, else the type."""
    text = str(exception).strip()
    if text and len(text) <= 48 and "://" not in text and "<" not in text:
        return text
    return type(exception).__name__
