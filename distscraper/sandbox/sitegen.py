"""A generated, reproducible web site as pure data: :class:`SiteSpec`.

For a given spec every page (status, headers, body) and the whole link graph
(:mod:`.sitegraph`) are always the same, and :meth:`SiteSpec.expected_paths`
says which paths a robots-obeying crawler that starts at ``/`` must end up
with, without crawling. This module renders the graph's pages (home, listings,
items); :mod:`.sitespecial` renders the special pages. Serving is
:class:`distscraper.sandbox.site.SiteServer`'s job.
"""

from __future__ import annotations

import html
import random
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from distscraper.sandbox.sitegraph import DISALLOWED_PREFIX, EXTRA_LINKS, graph_of
from distscraper.sandbox.sitehtml import (ADJECTIVES, WORDS, Reply, int_arg, link_list,
                                          not_found, page, paragraphs, text)
from distscraper.sandbox.sitespecial import MAX_BIG_KB, STATIC_ROUTES, big, render_special


@dataclass(frozen=True)
class SiteSpec:
    """The parameters of a generated site; equal specs give identical sites."""

    seed: int = 1
    pages: int = 2000
    categories: int = 20
    per_page: int = 25
    missing_links: int = 20
    crawl_delay: float | None = None
    extras: bool = False

    def __post_init__(self) -> None:
        if self.pages < 1 or self.categories < 1 or self.per_page < 1:
            raise ValueError("pages, categories and per_page must be >= 1")
        if self.missing_links < 0:
            raise ValueError("missing_links must be >= 0")
        if self.crawl_delay is not None and self.crawl_delay < 0:
            raise ValueError("crawl_delay must be >= 0")

    # --- graph ---------------------------------------------------------------
    def links(self, path: str) -> list[str]:
        """The links (paths) on the page at ``path``, in page order; [] for non-HTML or 404."""
        return list(graph_of(self).links(path))

    def allowed(self, path: str) -> bool:
        """Whether robots.txt allows crawling ``path``."""
        return not path.startswith(DISALLOWED_PREFIX)

    def expected_statuses(self) -> dict[str, int]:
        """Every path a robots-obeying crawler reaches from ``/``, with its final status.

        Redirect sources are left out (their targets are reached instead), as is
        the redirect loop; flaky and rate-limited pages count with their final 200.
        """
        graph = graph_of(self)
        out: dict[str, int] = {}
        seen = {"/"}
        queue = deque(["/"])
        while queue:
            path = queue.popleft()
            status = graph.status(path)
            if status is None:  # a special page: ask the renderer
                reply = self.render(path)
                location = reply.header("Location")
                if 300 <= reply.status < 400 and location:
                    found = [location]
                else:
                    out[path] = reply.status
                    found = []
            else:
                out[path] = status
                found = list(graph.links(path))
            for link in found:
                if link not in seen and self.allowed(link):
                    seen.add(link)
                    queue.append(link)
        return out

    def expected_paths(self) -> set[str]:
        """Paths (with query) a crawler stores an item for, 404s included, robots-disallowed excluded."""
        return set(self.expected_statuses())

    def expected_ok_paths(self) -> set[str]:
        """The subset of :meth:`expected_paths` whose final status is 200."""
        return {p for p, s in self.expected_statuses().items() if s == 200}

    def expected_urls(self, base_url: str) -> set[str]:
        """:meth:`expected_paths` as absolute URLs under ``base_url``."""
        base = base_url.rstrip("/")
        return {base + p for p in self.expected_paths()}

    # --- pages ---------------------------------------------------------------
    def render(self, path: str, base_url: str = "") -> Reply:
        """The reply for ``path`` (with query), ignoring server state.

        Flaky, rate-limited and slow pages render as their eventual 200 page:
        :class:`SiteServer` adds the failures and the sleep. ``base_url`` makes
        canonical links and sitemap entries absolute.
        """
        split = urlsplit(path)
        route = split.path
        if route == "/big":
            return big(int_arg(split.query, "kb", 100, 0, MAX_BIG_KB))
        if route in STATIC_ROUTES:
            return STATIC_ROUTES[route](self, base_url)
        return _render_cached(self, route, split.query, base_url)


def _item_name(spec: SiteSpec, item: int) -> str:
    rng = random.Random(f"{spec.seed}|name|{item}")
    return f"{rng.choice(ADJECTIVES).capitalize()} {rng.choice(WORDS).capitalize()} #{item}"


@lru_cache(maxsize=8192)
def _render_cached(spec: SiteSpec, route: str, query: str, base_url: str) -> Reply:
    graph = graph_of(spec)
    parsed = graph.parse(route)
    if parsed is None:
        return render_special(spec, route, query, base_url)
    kind, a, b = parsed
    canonical = base_url + (graph.listing_path(a, b) if kind == "listing" else route)
    rng = random.Random(f"{spec.seed}|{route}")
    if kind == "home":
        cats = [(graph.listing_path(c, 1), f"Category {c}") for c in graph.items_in]
        extras = [(p, p) for p in EXTRA_LINKS] if spec.extras else []
        body = ("<h1>Sandbox shop</h1>\n<h2>Categories</h2>\n" + link_list(cats)
                + paragraphs(rng, 2)
                + "<h2>Members</h2>\n" + link_list([("/private/x", "Private area")])
                + ("<h2>Special pages</h2>\n" + link_list(extras) if extras else ""))
        return Reply(200, page("Sandbox shop", "A generated site for crawler tests.", canonical, body))
    if kind == "listing":
        pages = graph.listing_pages(a)
        start = (b - 1) * spec.per_page
        items = [(f"/item/{i}", _item_name(spec, i))
                 for i in graph.items_in[a][start:start + spec.per_page]]
        nav = "<nav><a href=\"/\">Home</a>"
        if b > 1:
            nav += f" <a rel=\"prev\" href=\"{graph.listing_path(a, b - 1)}\">Previous</a>"
        if b < pages:
            nav += f" <a rel=\"next\" href=\"{graph.listing_path(a, b + 1)}\">Next</a>"
        nav += "</nav>\n"
        body = (f"<h1>Category {a}</h1>\n<h2>Page {b} of {pages}</h2>\n" + paragraphs(rng, 1)
                + link_list(items) + nav)
        title = f"Category {a} - page {b}"
        return Reply(200, page(title, f"Items of category {a}, page {b} of {pages}.", canonical, body))
    if kind == "item":
        name = _item_name(spec, a)
        cat = graph.category_of[a]
        description = text(rng, 14)
        related = [(f"/item/{i}", _item_name(spec, i)) for i in graph.related[a]]
        missing = [(f"/missing/{k}", f"Archived page {k}") for k in graph.missing_of.get(a, ())]
        body = (f"<nav><a href=\"/\">Home</a> &gt; <a href=\"{graph.listing_path(cat, 1)}\">"
                f"Category {cat}</a></nav>\n<h1>{html.escape(name)}</h1>\n"
                f"<p class=\"price\">{rng.randint(1, 999)}.{rng.randint(0, 99):02d} EUR</p>\n"
                "<h2>Description</h2>\n" + paragraphs(rng, rng.randint(2, 4))
                + "<h2>Details</h2>\n" + paragraphs(rng, 1)
                + "<h2>Related items</h2>\n" + link_list(related)
                + ("<h2>See also</h2>\n" + link_list(missing) if missing else ""))
        return Reply(200, page(f"{name} - Category {cat}", description, canonical, body))
    return not_found(route, base_url)
