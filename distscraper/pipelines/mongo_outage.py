"""Back-off, logging and the close deadline of the MongoDB writer's failure streaks.

:class:`Outage` guarantees:

* retries wait ``MONGO_RETRY_BASE`` seconds, doubling per consecutive failed
  attempt up to ``MONGO_RETRY_MAX``;
* a streak of failures is logged once when it starts (WARNING for an outage or
  a transient refusal, ERROR with the traceback for anything unexpected) and
  once when MongoDB accepts writes again (INFO); keys already stored are no
  failure (the writer upserts them at once, without this back-off);
* once the crawl is closing, retries stop ``MONGO_CLOSE_TIMEOUT`` seconds after
  the first failure seen while closing: :meth:`Outage.next_delay` then says to
  give up, and :meth:`Outage.gave_up` logs it in one ERROR line.
"""

from __future__ import annotations

import logging
import time

from pymongo.errors import BulkWriteError, ConnectionFailure
from twisted.python.failure import Failure

from distscraper.pipelines.mongo_client import LOGGER_NAME, MongoConfig, describe

logger = logging.getLogger(LOGGER_NAME)


class Outage:
    """The state of the current streak of failed bulk writes (none while writes succeed)."""

    def __init__(self, config: MongoConfig) -> None:
        self.config = config
        self._failures = 0  # consecutive failed attempts, for the back-off
        self._failing_since: float | None = None  # set while a logged failure lasts
        self._close_deadline: float | None = None

    def failed(self, failure: Failure, unwritten: int) -> None:
        """Log the first failure of a streak (the recovery is logged too)."""
        exc = failure.value
        if self._failing_since is not None:
            return
        self._failing_since = time.monotonic()
        uri = self.config.masked_uri
        if isinstance(exc, ConnectionFailure):
            logger.warning(
                "MongoDB at %s is unreachable (%s): keeping %d unwritten items and retrying "
                "every %.1f to %.1f s", uri, describe(exc), unwritten,
                self.config.retry_base, self.config.retry_max)
        elif isinstance(exc, BulkWriteError):
            logger.warning("MongoDB at %s refused writes with a transient error (%s): retrying",
                           uri, describe(exc))
        else:
            logger.error("Writing to MongoDB at %s failed (%s): keeping %d unwritten items and "
                         "retrying", uri, describe(exc), unwritten,
                         exc_info=(type(exc), exc, failure.getTracebackObject()))

    def succeeded(self, unwritten: int) -> None:
        """A bulk write completed: reset the back-off and log the end of a streak."""
        self._failures = 0
        if self._failing_since is not None:
            logger.info("MongoDB at %s accepts writes again after %.1f s; %d items still "
                        "unwritten", self.config.masked_uri,
                        time.monotonic() - self._failing_since, unwritten)
            self._failing_since = None

    def next_delay(self, closing: bool) -> float | None:
        """Seconds to wait before the next attempt, or None to give up (closing only)."""
        self._failures += 1
        delay = min(self.config.retry_max,
                    self.config.retry_base * 2 ** min(self._failures - 1, 32))
        if closing:
            now = time.monotonic()
            if self._close_deadline is None:
                self._close_deadline = now + self.config.close_timeout
            if now >= self._close_deadline:
                return None
            delay = min(delay, self._close_deadline - now)
        return delay

    def gave_up(self, count: int) -> None:
        """Log that the *count* unwritten items are given up."""
        logger.error(
            "MongoDB at %s is still failing %.0f s after the spider began closing: %d items "
            "were not stored; their requests are not acknowledged and will be crawled again",
            self.config.masked_uri, self.config.close_timeout, count)
