"""Every distscraper setting, with its default and meaning, in one place.

Components read settings only through :func:`get`, so a bad value fails fast
with an error that names the setting and the value. README.md's settings table
is generated from :data:`SETTINGS` (``python -m distscraper.readme_tables``).

Scrapy's own settings (``DOWNLOAD_DELAY``, ``RETRY_TIMES``, ...) keep their
Scrapy meaning and defaults; only the distscraper additions live here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable

from scrapy.settings import BaseSettings


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    kind: str  # "str", "int", "float", "bool", "list", "dict"
    doc: str
    minimum: float | None = None
    env: str | None = None  # environment variable that overrides the default


SETTINGS: dict[str, Setting] = {}


def _s(name: str, default: Any, kind: str, doc: str, minimum: float | None = None,
       env: str | None = None) -> None:
    SETTINGS[name] = Setting(name, default, kind, doc, minimum, env)


# --- connections ------------------------------------------------------------
_s("REDIS_URL", "redis://127.0.0.1:6379/0", "str",
   "Redis server holding the shared frontier. The `REDIS_URL` environment variable overrides the default.",
   env="REDIS_URL")
_s("MONGO_URI", "mongodb://127.0.0.1:27017", "str",
   "MongoDB server for items. The `MONGO_URI` environment variable overrides the default.",
   env="MONGO_URI")
_s("MONGO_DATABASE", "distscraper", "str", "Database for items.")
_s("MONGO_COLLECTION", "", "str", "Collection for items; empty means the spider's name.")
_s("MONGO_UNIQUE_KEY", "url", "str",
   "Item field with a unique index: one document per value, inserted, or upserted (`$set`) when it is stored already.")
_s("MONGO_BATCH_SIZE", 100, "int", "Items per bulk write.", minimum=1)
_s("MONGO_FLUSH_INTERVAL", 0.05, "float", "Seconds before a partial batch is written (short: a request is acknowledged only once its items are stored, and a killed worker's unstored pages are fetched again).", minimum=0.01)
_s("MONGO_BUFFER_MAX", 5000, "int",
   "Items held in memory while MongoDB is unreachable; when full, crawling pauses.", minimum=1)
_s("MONGO_RETRY_BASE", 0.5, "float", "First back-off delay (s) after a failed write.", minimum=0.01)
_s("MONGO_RETRY_MAX", 10.0, "float", "Longest back-off delay (s) between write attempts.", minimum=0.01)
_s("MONGO_CONNECT_TIMEOUT", 5.0, "float",
   "Seconds to wait for MongoDB at start-up (and per operation) before failing.", minimum=0.1)
_s("MONGO_CLOSE_TIMEOUT", 30.0, "float",
   "Seconds a closing worker keeps retrying unwritten items while MongoDB is unreachable; "
   "their requests stay unacknowledged and are crawled again.", minimum=0)

# --- frontier ---------------------------------------------------------------
_s("FRONTIER_KEY_PREFIX", "%(spider)s", "str",
   "Prefix of every Redis key; `%(spider)s` is the spider's name.")
_s("FRONTIER_LEASE_TIME", 0.0, "float",
   "Seconds a popped request stays leased before any node may return it to the queue. "
   "0 means DOWNLOAD_TIMEOUT + 30.", minimum=0)
_s("FRONTIER_POP_BATCH", 8, "int", "Requests leased per Redis round trip.", minimum=1)
_s("FRONTIER_MAX_LEASES", 0, "int",
   "Most leased requests a worker has handed to Scrapy and not yet parsed (downloading, or "
   "downloaded and waiting for the spider); it takes no more until one is parsed. A killed "
   "worker's unfinished pages are fetched again, so this (with MONGO_FLUSH_INTERVAL for "
   "pages whose items are being stored) bounds what a crash costs. 0 means CONCURRENT_REQUESTS.",
   minimum=0)
_s("FRONTIER_PUSH_BATCH", 200, "int",
   "Buffered new requests that force a flush to Redis before the next tick.", minimum=1)
_s("FRONTIER_TICK", 0.25, "float",
   "Seconds between background syncs (flush, acks, reaping, seeds).", minimum=0.01)
_s("FRONTIER_LOCAL_SEEN", 100_000, "int",
   "Fingerprints a worker remembers having sent to the seen-set, so links it meets again are "
   "not encoded and sent again (a shortcut only: the shared seen-set decides). 0 turns it off.",
   minimum=0)
_s("FRONTIER_SEED_BATCH", 100, "int", "Seeds read from `start_urls` per round trip.", minimum=1)
_s("FRONTIER_REAP_BATCH", 200, "int", "Expired leases or due retries moved per round trip.", minimum=1)
_s("FRONTIER_REDIS_BACKOFF_MAX", 5.0, "float",
   "Longest wait (s) between reconnection attempts while Redis is unreachable.", minimum=0.1)
_s("FRONTIER_PRIORITY_RULES", [], "list",
   "`[[regex, priority], ...]`: the first pattern that matches a URL sets its priority "
   "(unless the request or seed gives one).")
_s("FRONTIER_FLUSH_ON_START", False, "bool",
   "Delete the spider's frontier keys when a worker starts. Off: workers never delete shared keys.")
_s("MAX_IDLE_TIME_BEFORE_CLOSE", 0, "int",
   "Close a worker after the whole cluster has had no work (seeds, queue, in flight, delayed) "
   "for this many seconds. 0 waits for seeds forever.", minimum=0)

# --- dupefilter -------------------------------------------------------------
_s("DUPEFILTER_TTL", 0, "int",
   "Seconds after which the seen-set expires so a recrawl may fetch pages again; 0 keeps it.",
   minimum=0)
_s("DUPEFILTER_CAPACITY", 1_000_000, "int",
   "URLs the exact seen-set's first generation of buckets is sized for; it grows past it by "
   "adding generations twice as large (each one more lookup per new URL).", minimum=1000)
_s("DUPEFILTER_BLOOM_CAPACITY", 100_000_000, "int", "URLs the Bloom dupefilter is sized for.",
   minimum=1000)
_s("DUPEFILTER_BLOOM_ERROR", 0.001, "float",
   "False-positive rate of the Bloom dupefilter at its capacity.", minimum=1e-9)

# --- seeds ------------------------------------------------------------------
_s("SEED_MAX_BYTES", 8192, "int", "Largest accepted seed payload (bytes).", minimum=16)

# --- the site spider ---------------------------------------------------------
_s("SITE_ALLOW", [], "list", "Regexes; when set, only matching URLs are followed.")
_s("SITE_DENY", [], "list", "Regexes; matching URLs are never followed.")
_s("SITE_ALLOWED_DOMAINS", [], "list", "Domains followed in addition to the seeds' domains.")
_s("SITE_FOLLOW_LINKS", True, "bool", "Follow links found on pages.")
_s("SITE_NON_HTML", "record", "str",
   "What to do with non-HTML responses: `record` stores an item without parsing, `skip` stores nothing.")

# --- retries and politeness ---------------------------------------------------
_s("RETRY_BACKOFF_BASE", 1.0, "float", "Delay (s) before the first retry; doubles each attempt.",
   minimum=0)
_s("RETRY_BACKOFF_MAX", 60.0, "float", "Longest delay (s) between retries.", minimum=0)
_s("RETRY_JITTER", 0.25, "float", "Random spread of a retry delay, as a fraction of it.", minimum=0)
_s("THROTTLE_BACKOFF_BASE", 1.0, "float",
   "Delay (s) a domain gets after its first 429/503; doubles on each further one.", minimum=0)
_s("THROTTLE_BACKOFF_MAX", 60.0, "float", "Longest extra delay (s) for a domain after 429/503.",
   minimum=0)
_s("THROTTLE_RECOVER_AFTER", 10.0, "float",
   "Seconds without a 429/503 after which a domain's extra delay halves.", minimum=0.1)
_s("ROBOTSTXT_CRAWL_DELAY_MAX", 60.0, "float",
   "Longest robots.txt `Crawl-delay` (s) the cluster honours; longer ones are capped. 0 ignores Crawl-delay.",
   minimum=0)

# --- monitoring ---------------------------------------------------------------
_s("NODE_ID", "", "str", "This worker's id; empty means `<host>-<pid>`.")
_s("HEARTBEAT_INTERVAL", 2.0, "float", "Seconds between heartbeats.", minimum=0.1)
_s("HEARTBEAT_TTL", 10.0, "float", "Seconds after which a silent node is gone.", minimum=0.5)
_s("METRICS_PORT", 0, "int", "Serve Prometheus metrics on this port; 0 is off.", minimum=0)
_s("METRICS_HOST", "127.0.0.1", "str", "Address the Prometheus metrics server listens on.")


def _read_list(settings: BaseSettings, name: str, _default: Any) -> list[Any]:
    """A list: a Python list, a JSON array string, or comma-separated text."""
    value = settings.get(name)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = json.loads(text)
            if not isinstance(value, list):
                raise ValueError("not a JSON array")
            return value
        return [part.strip() for part in text.split(",") if part.strip()]
    return list(value)


_READERS: dict[str, Callable[[BaseSettings, str, Any], Any]] = {
    "str": lambda s, n, d: s.get(n, d),
    "int": lambda s, n, d: s.getint(n, d),
    "float": lambda s, n, d: s.getfloat(n, d),
    "bool": lambda s, n, d: s.getbool(n, d),
    "list": _read_list,
    "dict": lambda s, n, d: s.getdict(n, d),
}


def default(name: str) -> Any:
    """The default of a setting, after its environment variable if it has one."""
    spec = SETTINGS[name]
    if spec.env and os.environ.get(spec.env):
        return os.environ[spec.env]
    return spec.default


def get(settings: BaseSettings, name: str) -> Any:
    """Read and validate one setting; raise ValueError naming it and the bad value."""
    spec = SETTINGS[name]
    raw = settings.get(name)
    if raw is None or raw == "" and spec.kind == "str":
        raw = None
    try:
        value = default(name) if raw is None else _READERS[spec.kind](settings, name, None)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"setting {name}={raw!r} is not a valid {spec.kind}: {exc}") from None
    if spec.minimum is not None and value < spec.minimum:
        raise ValueError(f"setting {name}={value!r} must be >= {spec.minimum}")
    return value


def markdown_table() -> str:
    """The settings table of README.md."""
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    for spec in SETTINGS.values():
        rows.append(f"| `{spec.name}` | `{spec.default!r}` | {spec.doc} |")
    return "\n".join(rows)

