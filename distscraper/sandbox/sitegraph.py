"""The link graph of a generated sandbox site, derived from its spec alone.

Link graph: ``/`` -> every category ``/cat/<c>/`` (+ ``/private/x``, disallowed
by robots.txt) -> listing pages ``/cat/<c>/page/<n>`` (next/prev) -> detail
pages ``/item/<id>`` -> 2-4 related items, their category, and for some items
``/missing/<k>`` (404). With ``extras=True`` the home page also links the
special pages (:data:`EXTRA_LINKS`).

:func:`graph_of` guarantees that equal specs give the same graph: category
assignment, related items and missing links come from ``random.Random(seed)``.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distscraper.sandbox.sitegen import SiteSpec

#: Special pages linked from ``/`` when ``SiteSpec.extras`` is true.
EXTRA_LINKS: tuple[str, ...] = (
    "/sitemap.xml",
    "/slow?s=2",
    "/flaky/extras?fails=2",
    "/ratelimit/extras?n=2",
    "/fail/extras",
    "/status/403",
    "/status/410",
    "/files/1.pdf",
    "/files/2.pdf",
    "/image.png",
    "/empty",
    "/broken-encoding",
    "/big?kb=256",
    "/loop/a",
    "/redirect/1",
)

DISALLOWED_PREFIX = "/private/"


class Graph:
    """Category assignment, related items and missing links of one spec."""

    def __init__(self, spec: SiteSpec) -> None:
        self.spec = spec
        rng = random.Random(spec.seed)
        ids = list(range(1, spec.pages + 1))
        rng.shuffle(ids)
        self.category_of: dict[int, int] = {}
        self.items_in: dict[int, list[int]] = {c: [] for c in range(1, spec.categories + 1)}
        for index, item in enumerate(ids):
            cat = index % spec.categories + 1
            self.category_of[item] = cat
            self.items_in[cat].append(item)
        for items in self.items_in.values():
            items.sort()
        self.related: dict[int, list[int]] = {}
        for item in range(1, spec.pages + 1):
            want = min(rng.randint(2, 4), spec.pages - 1)
            picks: list[int] = []
            while len(picks) < want:
                other = rng.randint(1, spec.pages)
                if other != item and other not in picks:
                    picks.append(other)
            self.related[item] = picks
        self.missing_of: dict[int, list[int]] = {}
        for k in range(1, spec.missing_links + 1):
            self.missing_of.setdefault(rng.randint(1, spec.pages), []).append(k)

    def listing_pages(self, cat: int) -> int:
        return max(1, math.ceil(len(self.items_in[cat]) / self.spec.per_page))

    @staticmethod
    def listing_path(cat: int, page: int) -> str:
        return f"/cat/{cat}/" if page == 1 else f"/cat/{cat}/page/{page}"

    def parse(self, path: str) -> tuple[str, int, int] | None:
        """("home"|"listing"|"item"|"missing", a, b) for graph pages, else None."""
        if path == "/":
            return ("home", 0, 0)
        parts = path.strip("/").split("/")
        try:
            if parts[0] == "item" and len(parts) == 2 and path[-1] != "/":
                item = int(parts[1])
                return ("item", item, 0) if str(item) == parts[1] and item in self.category_of else None
            if parts[0] == "missing" and len(parts) == 2:
                return ("missing", int(parts[1]), 0)
            if parts[0] == "cat":
                cat = int(parts[1])
                if cat not in self.items_in or str(cat) != parts[1]:
                    return None
                if len(parts) == 2 and path.endswith("/"):
                    return ("listing", cat, 1)
                if len(parts) == 4 and parts[2] == "page" and not path.endswith("/"):
                    page = int(parts[3])
                    if str(page) == parts[3] and 1 <= page <= self.listing_pages(cat):
                        return ("listing", cat, page)
        except (ValueError, IndexError):
            return None
        return None

    def status(self, path: str) -> int | None:
        """200/404 for graph pages, None for anything else."""
        parsed = self.parse(path)
        if parsed is None:
            return None
        return 404 if parsed[0] == "missing" else 200

    def links(self, path: str) -> tuple[str, ...]:
        parsed = self.parse(path)
        if parsed is None:
            return ()
        kind, a, b = parsed
        if kind == "home":
            links = [self.listing_path(c, 1) for c in self.items_in] + ["/private/x"]
            if self.spec.extras:
                links += EXTRA_LINKS
            return tuple(links)
        if kind == "listing":
            links = ["/"]
            if b > 1:
                links.append(self.listing_path(a, b - 1))
            start = (b - 1) * self.spec.per_page
            links += [f"/item/{i}" for i in self.items_in[a][start:start + self.spec.per_page]]
            if b < self.listing_pages(a):
                links.append(self.listing_path(a, b + 1))
            return tuple(links)
        if kind == "item":
            links = ["/", self.listing_path(self.category_of[a], 1)]
            links += [f"/item/{i}" for i in self.related[a]]
            links += [f"/missing/{k}" for k in self.missing_of.get(a, ())]
            return tuple(links)
        return ()


@lru_cache(maxsize=16)
def graph_of(spec: SiteSpec) -> Graph:
    """The (cached) graph of *spec*."""
    return Graph(spec)
