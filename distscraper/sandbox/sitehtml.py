"""The building blocks of the sandbox site's pages: replies, words, HTML, query args.

Everything here is pure and deterministic: the same arguments (and the same
seeded :class:`random.Random`) always give the same bytes.
"""

from __future__ import annotations

import html
import math
import random
from dataclasses import dataclass
from urllib.parse import parse_qs

HTML = "text/html; charset=utf-8"

WORDS = (
    "amber anchor apex arbor atlas beacon birch breeze canyon cedar cinder citrus cobalt coral "
    "crest delta drift ember falcon fern fjord flint garnet glacier granite harbor hazel horizon "
    "indigo iris jade juniper kelp lagoon lantern lark linen lotus maple marble meadow mesa mist "
    "nectar nimbus oak onyx orchid pebble pine plume prairie quartz quill raven reef ridge river "
    "saffron sage sierra slate sparrow spruce summit tidal timber topaz tundra umber valley velvet "
    "willow zenith").split()
ADJECTIVES = (
    "ancient bold bright calm clever crisp dapper eager fancy gentle grand hardy humble jolly "
    "keen lively lucky mellow nimble noble plain proud quiet rapid rustic shiny sleek smooth "
    "solid sturdy swift tidy vivid warm wild").split()


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: status, content type, body and extra headers."""

    status: int
    body: bytes = b""
    content_type: str = HTML
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


def text(rng: random.Random, words: int) -> str:
    out = [rng.choice(WORDS) for _ in range(words)]
    return " ".join(out).capitalize() + "."


def paragraphs(rng: random.Random, count: int) -> str:
    return "".join(f"<p>{text(rng, rng.randint(12, 40))}</p>\n" for _ in range(count))


def page(title: str, description: str, canonical: str, body: str) -> bytes:
    """A whole HTML document with a title, a meta description and a canonical link."""
    esc = html.escape
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{esc(title)}</title>\n"
        f"<meta name=\"description\" content=\"{esc(description)}\">\n"
        f"<link rel=\"canonical\" href=\"{esc(canonical)}\">\n"
        f"</head>\n<body>\n{body}</body>\n</html>\n"
    ).encode("utf-8")


def link_list(items: list[tuple[str, str]]) -> str:
    lis = "".join(f"<li><a href=\"{html.escape(h)}\">{html.escape(t)}</a></li>\n" for h, t in items)
    return f"<ul>\n{lis}</ul>\n"


def not_found(path: str, base_url: str) -> Reply:
    body = (f"<h1>Not found</h1>\n<h2>Error 404</h2>\n"
            f"<p>There is no page at {html.escape(path)}.</p>\n")
    return Reply(404, page("404 Not found", f"No page at {path}", base_url + path, body))


def simple(status: int, title: str, message: str, base_url: str, route: str) -> Reply:
    """A one-paragraph page answering *status*."""
    body = f"<h1>{html.escape(title)}</h1>\n<h2>{status}</h2>\n<p>{html.escape(message)}</p>\n"
    return Reply(status, page(title, message, base_url + route, body))


def int_arg(query: str, name: str, default: int, low: int, high: int) -> int:
    """Query argument *name* as an int clamped to [low, high]; *default* if absent or bad."""
    try:
        value = int(parse_qs(query).get(name, [default])[0])
    except ValueError:
        value = default
    return max(low, min(high, value))


def float_arg(query: str, name: str, default: float, low: float, high: float) -> float:
    """Query argument *name* as a float clamped to [low, high]; *default* if absent or bad."""
    try:
        value = float(parse_qs(query).get(name, [default])[0])
    except ValueError:
        value = default
    return max(low, min(high, value)) if math.isfinite(value) else default
