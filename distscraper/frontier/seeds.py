"""Seeds pushed to ``<spider>:start_urls``: parsing and validation.

A seed is a plain URL (``https://example.com/``) or a JSON object
``{"url": ..., "priority": 9, "meta": {...}, "force": true}``. Anything else is
rejected with a :class:`SeedError` whose message says what is wrong; the
frontier moves the seed to ``start_urls:invalid`` with that reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

ALLOWED_SCHEMES = ("http", "https")


class SeedError(ValueError):
    """A seed that cannot become a request; the message is the reason."""


@dataclass(frozen=True)
class Seed:
    url: str
    priority: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    force: bool = False  # fetch even if already seen


def check_url(url: str) -> str:
    """Return *url* stripped if it is an absolute http(s) URL, else raise SeedError."""
    url = url.strip()
    if not url:
        raise SeedError("empty URL")
    if any(c.isspace() for c in url):
        raise SeedError("not a URL: contains white space")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise SeedError(f"not a URL: {exc}") from None
    if not parts.scheme:
        raise SeedError("not a URL: no scheme (expected http:// or https://)")
    if parts.scheme.lower() not in ALLOWED_SCHEMES:
        raise SeedError(f"scheme {parts.scheme!r} is not http or https")
    if not parts.hostname:
        raise SeedError("not a URL: no host")
    return url


def parse_seed(raw: bytes | str, max_bytes: int = 8192) -> Seed:
    """Turn one entry of ``start_urls`` into a :class:`Seed`."""
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > max_bytes:
        raise SeedError(f"seed is {len(data)} bytes, over SEED_MAX_BYTES={max_bytes}")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SeedError("seed is not UTF-8 text") from None
    if not text.startswith("{"):
        return Seed(check_url(text))
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise SeedError(f"malformed JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise SeedError("JSON seed must be an object")
    if "url" not in obj:
        raise SeedError("JSON seed has no 'url'")
    if not isinstance(obj["url"], str):
        raise SeedError("JSON seed 'url' must be a string")
    priority = obj.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise SeedError(f"JSON seed 'priority' must be an integer, not {type(priority).__name__}")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise SeedError(f"JSON seed 'meta' must be an object, not {type(meta).__name__}")
    force = obj.get("force", False)
    if not isinstance(force, bool):
        raise SeedError("JSON seed 'force' must be true or false")
    return Seed(check_url(obj["url"]), priority, meta, force)
