"""The fingerprints one worker has already sent to the shared seen-set.

A page links to many pages the crawl has seen already (menus, categories,
pagination). Remembering, per worker, which fingerprints it has sent spares
encoding and sending those links again. It is only a shortcut: a fingerprint
is remembered only after it was queued for the seen-set, forgetting costs
one more entry in a round trip, and the shared seen-set alone decides what is
new. The memory is bounded (``FRONTIER_LOCAL_SEEN``) and, when the seen-set
expires (``DUPEFILTER_TTL``), so does this.
"""

from __future__ import annotations

import time


class KnownFingerprints:
    """A bounded set of fingerprints; cleared whole when full or expired."""

    def __init__(self, limit: int, ttl: float = 0) -> None:
        self.limit = limit
        self.ttl = ttl
        self._fps: set[bytes] = set()
        self._since = time.monotonic()

    def seen(self, fp: bytes) -> bool:
        """True if *fp* was sent before; otherwise remember it and return False."""
        if fp in self._fps:
            return True
        if self.limit <= 0:
            return False
        if len(self._fps) >= self.limit or (self.ttl and time.monotonic() - self._since > self.ttl):
            self._fps.clear()
            self._since = time.monotonic()
        self._fps.add(fp)
        return False
