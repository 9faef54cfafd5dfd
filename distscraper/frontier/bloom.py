"""A Bloom-filter seen-set: about 1.8 bytes per URL at a 0.1% false-positive rate.

:class:`BloomDupeFilter` has the interface of the exact
:class:`~distscraper.frontier.dupefilter.RedisDupeFilter` (enable it with
``DUPEFILTER_CLASS = "distscraper.frontier.bloom.BloomDupeFilter"``).

Guarantees: a URL seen before is always reported as seen; a new URL is wrongly
reported as seen (and so never crawled) with probability at most
``DUPEFILTER_BLOOM_ERROR`` while at most ``DUPEFILTER_BLOOM_CAPACITY`` URLs were
added (more URLs raise the rate). The check-and-add of a URL's k bits is one
BITFIELD inside the frontier's Lua script, atomic across workers. The filter is split over several string keys
``<prefix>:dupefilter:bloom:<i>`` of at most :attr:`KEY_BITS` bits each, so it can
grow past one Redis string's 512 MB. The sizes are stored in
``<prefix>:dupefilter`` when the filter is created and win over later settings.
"""

from __future__ import annotations

import math
from typing import Any

from scrapy.settings import BaseSettings

from distscraper import defaults
from distscraper.frontier.dupefilter import RedisDupeFilter

#: Lua's doubles hold integers exactly up to 2^53: h1 + i*h2 with 48-bit h1, h2
#: stays exact for up to 31 hashes; offsets are formatted with 14 digits.
MAX_HASHES = 31
MAX_BITS = 2**46


def bloom_size(capacity: int, error: float) -> tuple[int, int]:
    """Optimal bits m = -n ln p / (ln 2)^2 and hash count k = (m / n) ln 2 for n items, rate p."""
    if not 0 < error < 1:
        raise ValueError(f"Bloom error rate {error!r} must be between 0 and 1")
    bits = math.ceil(-capacity * math.log(error) / math.log(2) ** 2)
    hashes = max(1, round(bits / capacity * math.log(2)))
    return bits, hashes


def false_positive_rate(bits: int, hashes: int, items: int) -> float:
    """The expected rate (1 - e^(-k n / m))^k after *items* additions."""
    return (1 - math.exp(-hashes * items / bits)) ** hashes


class BloomDupeFilter(RedisDupeFilter):
    """Bloom seen-set sized by DUPEFILTER_BLOOM_CAPACITY and DUPEFILTER_BLOOM_ERROR."""

    KIND = "bloom"
    #: Largest string key, in bits (a power of two; Redis's limit is 2^32 bits = 512 MB).
    #: 8 MB keys are cheap to create, copy and delete.
    KEY_BITS = 2**26
    #: Split into at least this many keys when they can be KEY_BITS or smaller, so
    #: rounding the last one up wastes at most 1/16 of the memory.
    MIN_KEYS = 16
    #: Bytes Redis adds to a string (header and NUL); key_bits/8 + this is a
    #: power of two, which the allocator gives without rounding up.
    STRING_OVERHEAD = 16

    def __init__(self, *args: Any, error: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error = float(error if error is not None else defaults.default("DUPEFILTER_BLOOM_ERROR"))
        self.bits, self.hashes = bloom_size(self.capacity, self.error)
        if self.hashes > MAX_HASHES or self.bits > MAX_BITS:
            raise ValueError(f"Bloom filter for {self.capacity} URLs at error {self.error} is too large "
                             f"({self.bits} bits, {self.hashes} hashes)")

    @classmethod
    def _capacity_setting(cls) -> str:
        return "DUPEFILTER_BLOOM_CAPACITY"

    @classmethod
    def _options(cls, settings: BaseSettings) -> dict[str, Any]:
        return {**super()._options(settings), "error": defaults.get(settings, "DUPEFILTER_BLOOM_ERROR")}

    def layout(self) -> dict[str, int | float | str]:
        """Equal keys of a power-of-two allocation, together at least the optimal m bits."""
        if self.KEY_BITS & (self.KEY_BITS - 1) or self.KEY_BITS < 8 * 2 * self.STRING_OVERHEAD:
            raise ValueError(f"KEY_BITS={self.KEY_BITS} must be a power of two >= 256")
        need = math.ceil(self.bits / 8)
        alloc = self.KEY_BITS // 8
        while alloc > 1024 and need < self.MIN_KEYS * (alloc - self.STRING_OVERHEAD):
            alloc //= 2
        key_bits = 8 * (alloc - self.STRING_OVERHEAD)
        keys = math.ceil(self.bits / key_bits)
        hashes = min(MAX_HASHES, max(1, round(keys * key_bits / self.capacity * math.log(2))))
        return {"kind": self.KIND, "m": keys * key_bits, "k": hashes, "key_bits": key_bits,
                "keys": keys, "capacity": self.capacity, "error": self.error}
