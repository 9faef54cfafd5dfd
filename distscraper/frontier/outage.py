"""Back-off while Redis is unreachable, with one clear log line when it goes and one when it returns."""

from __future__ import annotations

import logging
import time

logger = logging.getLogger(__name__)


class Outage:
    """Tracks whether Redis is reachable and when to try again (exponential back-off)."""

    def __init__(self, redis_url: str, backoff_max: float, first_backoff: float = 0.1) -> None:
        self.redis_url = redis_url  # masked
        self.backoff_max = backoff_max
        self.first_backoff = first_backoff
        self.down_since: float | None = None
        self.retry_at = 0.0
        self._backoff = first_backoff

    def may_try(self) -> bool:
        return time.monotonic() >= self.retry_at

    def failed(self, exc: Exception, buffered: int) -> None:
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
            self._backoff = self.first_backoff
            logger.warning("Redis at %s unreachable (%s); keeping %d buffered changes and retrying",
                           self.redis_url, exc, buffered)
        self.retry_at = now + self._backoff
        self._backoff = min(self._backoff * 2, self.backoff_max)

    def succeeded(self) -> None:
        if self.down_since is not None:
            logger.warning("Redis at %s reachable again after %.1fs", self.redis_url,
                           time.monotonic() - self.down_since)
            self.down_since = None
            self.retry_at = 0.0
