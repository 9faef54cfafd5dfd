"""Seen-sets shared by every worker, built on scrapy-redis's RFPDupeFilter.

:class:`RedisDupeFilter` is exact: it keeps 16-byte request fingerprints in
small Redis HASHes that stay ziplist-encoded (about 20 bytes per URL, where
scrapy-redis's SET of hex strings costs 88), growing by generations so the
number of URLs need not be known in advance (docs/seen-set.md).

Guarantees: the check-and-add runs inside the frontier's Lua script, so one
round trip filters all links of a page and two workers can never both see a URL
as new; the layout is stored in ``<prefix>:dupefilter`` when the seen-set is
created and wins over later settings, so every worker and producer agrees on
it; closing a worker never deletes the seen-set (only an explicit flush does).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis
from scrapy import Request
from scrapy.settings import BaseSettings
from scrapy.utils.request import fingerprint
from scrapy_redis.dupefilter import RFPDupeFilter

from distscraper import defaults
from distscraper.frontier.connection import redis_from_settings
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.store import lua

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

FINGERPRINT_BYTES = 16
_ADD_MANY = ("\nlocal out = {}\nfor i = 2, #ARGV do out[i - 1] = seen_add(ARGV[i]) end\n"
             "seen_flush()\nreturn out\n")
_HAS_MANY = "\nlocal out = {}\nfor i = 2, #ARGV do out[i - 1] = seen_has(ARGV[i]) end\nreturn out\n"


class RedisDupeFilter(RFPDupeFilter):
    """Exact seen-set; optional expiry (DUPEFILTER_TTL) for recrawls."""

    logger = logger
    KIND = "exact"
    #: Average entries per bucket when a generation is full: far below Redis's
    #: hash-max-ziplist-entries (512 in 6.2; 128 in the redis.conf of 7.x).
    BUCKET_FILL = 64
    #: Largest bucket count of a generation, as a power of two.
    MAX_BUCKET_BITS = 24

    def __init__(self, server: redis.Redis, key: str, debug: bool = False, *,
                 crawler: "Crawler | None" = None, ttl: int = 0, capacity: int | None = None) -> None:
        super().__init__(server, key, debug)
        if not key.endswith("dupefilter"):
            raise ValueError(f"dupefilter key {key!r} must end with 'dupefilter'")
        self.crawler = crawler  # its request_fingerprinter exists only once the crawl starts
        self.ttl = int(ttl)
        self.capacity = int(capacity or defaults.default(self._capacity_setting()))
        self.prefix = key[: -len("dupefilter")]  # "<prefix>:" as the scripts' ARGV[1]
        self._scripts: dict[str, Any] = {}

    @classmethod
    def _capacity_setting(cls) -> str:
        return "DUPEFILTER_CAPACITY"

    @classmethod
    def _options(cls, settings: BaseSettings) -> dict[str, Any]:
        """Constructor keywords read from the settings (subclasses add theirs)."""
        return {"ttl": defaults.get(settings, "DUPEFILTER_TTL"),
                "capacity": defaults.get(settings, cls._capacity_setting())}

    @classmethod
    def from_crawler(cls, crawler: "Crawler") -> "RedisDupeFilter":
        settings = crawler.settings
        keys = FrontierKeys.for_spider(crawler.spidercls.name, defaults.get(settings, "FRONTIER_KEY_PREFIX"))
        return cls(redis_from_settings(settings), keys.dupefilter, settings.getbool("DUPEFILTER_DEBUG"),
                   crawler=crawler, **cls._options(settings))

    def fingerprint(self, request: Request) -> bytes:
        """16 bytes of Scrapy's request fingerprint (canonical URL, method, body)."""
        if self.crawler is not None:
            return self.crawler.request_fingerprinter.fingerprint(request)[:FINGERPRINT_BYTES]
        return fingerprint(request)[:FINGERPRINT_BYTES]

    def request_fingerprint(self, request: Request) -> str:
        return self.fingerprint(request).hex()

    def layout(self) -> dict[str, int | float | str]:
        """The layout a seen-set created by this filter gets (stored in ``<prefix>:dupefilter``)."""
        bits0 = max(0, math.ceil(math.log2(self.capacity / self.BUCKET_FILL)))
        return {"kind": self.KIND, "bits0": min(bits0, self.MAX_BUCKET_BITS),
                "fill": self.BUCKET_FILL, "max_bits": self.MAX_BUCKET_BITS}

    def lua_prelude(self) -> str:
        """Lua defining ``seen_add(fp)`` (and ``seen_has(fp)``) for the frontier's scripts."""
        layout = self.layout()
        fields = ", ".join(f"'{name}'" for name in layout)
        values = ", ".join(f"{name} = {_lua_value(v)}" for name, v in layout.items())
        return (f"local DF = {{ttl = {self.ttl}, {values}}}\nlocal DF_FIELDS = {{{fields}}}\n"
                + lua("seen_bloom.lua") + lua("seen_set.lua"))

    def _script(self, body: str) -> Any:
        if body not in self._scripts:
            self._scripts[body] = self.server.register_script(self.lua_prelude() + body)
        return self._scripts[body]

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        """Check-and-add in one atomic call; True for each fingerprint that was new."""
        if not fingerprints:
            return []
        return [bool(x) for x in self._script(_ADD_MANY)(args=[self.prefix, *fingerprints])]

    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        """Read-only membership test (for a Bloom filter: possibly a false positive)."""
        if not fingerprints:
            return []
        return [bool(x) for x in self._script(_HAS_MANY)(args=[self.prefix, *fingerprints])]

    def request_seen(self, request: Request) -> bool:
        """Standalone check-and-add (the frontier does this in bulk inside its script)."""
        return not self.add_many([self.fingerprint(request)])[0]

    def stored_layout(self) -> dict[str, str]:
        """The layout and fill stored in ``<prefix>:dupefilter`` ({} before the first URL)."""
        if self.server.type(self.key) != b"hash":
            return {}
        return {k.decode(): v.decode() for k, v in self.server.hgetall(self.key).items()}

    def clear(self) -> None:
        """Delete the whole seen-set: ``<prefix>:dupefilter`` and ``<prefix>:dupefilter:*``."""
        batch = [self.key]
        for k in self.server.scan_iter(match=self.key + ":*", count=1000):
            batch.append(k)
            if len(batch) >= 500:
                self.server.unlink(*batch)
                batch = []
        self.server.unlink(*batch)

    def close(self, reason: str = "") -> None:
        """Keep the shared seen-set: other workers still use it."""


def _lua_value(value: int | float | str) -> str:
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    return str(int(value))
