"""Feed a crawl from any Python program: the counterpart of Celery's ``.delay(url)``.

>>> with Producer("redis://127.0.0.1:6379/0") as producer:     # doctest: +SKIP
...     producer.delay("https://example.com/")
...     producer.apply_async("https://example.com/urgent", priority=9)
...     producer.push_many(urls_from_sitemap("https://example.com/sitemap.xml"))

Guarantees: a seed is validated exactly as the workers validate it (a rejected
seed is counted with its reason and never pushed); an accepted one becomes the
request the ``site`` spider would build, with the workers' priority rules and
fingerprint, and is deduplicated and queued in ONE atomic round trip per batch
(the workers' exchange script), so it is never queued twice nor lost between
the check and the push. With ``max_queue`` a push waits while the frontier's
queue is full and never pushes more than the room left.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from scrapy import Request, Spider
from scrapy.settings import BaseSettings
from scrapy.spiderloader import get_spider_loader
from scrapy.utils.misc import load_object
from scrapy.utils.project import get_project_settings

from distscraper import defaults
from distscraper.frontier import codec
from distscraper.frontier.connection import redis_from_settings
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.priority import PriorityRules
from distscraper.frontier.seeds import SeedError
from distscraper.frontier.store import ExchangeParams, FrontierStore, Outbox, Push, push_row
from distscraper.masking import mask_url
from distscraper.monitor.figures import read_figures
from distscraper.sitemaps import urls_from_sitemap
from distscraper.spiders.site import SiteSpider

__all__ = ["Producer", "PushResult", "QueueFullTimeout", "urls_from_sitemap"]

SeedLike = str | bytes | Mapping[str, Any]


@dataclass
class PushResult:
    """What became of the seeds of one call."""

    added: int = 0
    skipped: int = 0  # already seen or already queued
    rejections: list[tuple[str, str]] = field(default_factory=list)  # (seed, reason)

    @property
    def rejected(self) -> int:
        return len(self.rejections)

    def as_dict(self) -> dict[str, Any]:
        return {"added": self.added, "skipped": self.skipped, "rejected": self.rejected,
                "rejections": [{"seed": s, "reason": r} for s, r in self.rejections]}


class QueueFullTimeout(TimeoutError):
    """``max_queue`` was still exceeded after ``timeout``; ``.result`` says what was pushed."""

    def __init__(self, message: str, result: PushResult) -> None:
        super().__init__(message)
        self.result = result


def producer_settings(settings: Mapping[str, Any] | BaseSettings | None = None,
                      redis_url: str | None = None) -> BaseSettings:
    """*settings* if it is a Settings object, else the project's settings updated with the dict."""
    if isinstance(settings, BaseSettings):
        out = settings.copy()
        out.frozen = False
    else:
        out = get_project_settings()
        if not os.environ.get("SCRAPY_SETTINGS_MODULE"):  # run outside the project directory
            out.setmodule("distscraper.settings", priority="project")
        out.setdict(dict(settings or {}), priority="cmdline")
    if redis_url:
        out.set("REDIS_URL", redis_url, priority="cmdline")
    return out


def seed_spider(settings: BaseSettings, name: str) -> Spider:
    """A bare instance of the spider (never started, no crawler): it builds the seed requests
    and names their callbacks exactly as a worker's spider does."""
    try:
        spidercls = get_spider_loader(settings).load(name)
    except KeyError:  # a frontier name that is not a spider of this project
        spidercls = SiteSpider
    spider = spidercls()
    spider.seed_max_bytes = defaults.get(settings, "SEED_MAX_BYTES")  # set by setup_redis in a worker
    return spider


class Producer:
    """Pushes seeds of one spider's frontier (see the module docstring)."""

    BATCH = 500
    POLL_S = 0.5

    def __init__(self, redis_url: str | None = None, spider: str = "site",
                 settings: Mapping[str, Any] | BaseSettings | None = None) -> None:
        self.settings = producer_settings(settings, redis_url)
        self.redis_url = mask_url(defaults.get(self.settings, "REDIS_URL"))
        self.server = redis_from_settings(self.settings)
        self.keys = FrontierKeys.for_spider(spider, defaults.get(self.settings, "FRONTIER_KEY_PREFIX"))
        df_cls = load_object(self.settings.get("DUPEFILTER_CLASS"))
        if not hasattr(df_cls, "lua_prelude"):
            raise ValueError(f"setting DUPEFILTER_CLASS={self.settings.get('DUPEFILTER_CLASS')!r} "
                             "is not a distscraper dupefilter")
        # no crawler: the filter fingerprints with Scrapy's default, and takes its sizes from settings
        options = getattr(df_cls, "_options", None)
        kwargs = options(self.settings) if options else {"ttl": defaults.get(self.settings, "DUPEFILTER_TTL")}
        self.dupefilter = df_cls(self.server, self.keys.dupefilter, **kwargs)
        self.store = FrontierStore(self.server, self.keys, self.dupefilter.lua_prelude())
        self.rules = PriorityRules.from_setting(defaults.get(self.settings, "FRONTIER_PRIORITY_RULES"))
        self.spider = seed_spider(self.settings, spider)
        self.params = ExchangeParams(node=f"producer-{socket.gethostname()}-{os.getpid()}",
                                     lease_ms=60_000)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.server.close()

    def ping(self) -> None:
        """Raise ConnectionError (URL masked) unless Redis answers."""
        self._call(self.server.ping)

    # -- API ----------------------------------------------------------------------
    def delay(self, url: str) -> PushResult:
        """Queue *url* with default priority (skipped if already seen)."""
        return self.apply_async(url)

    def apply_async(self, url: str, priority: int = 0, meta: Mapping[str, Any] | None = None,
                    force: bool = False, *, max_queue: int | None = None,
                    timeout: float | None = None) -> PushResult:
        """Queue *url* with a priority (higher first), request meta, or *force* (fetch even if seen)."""
        seed: dict[str, Any] = {"url": url, "priority": priority}
        if meta:
            seed["meta"] = dict(meta)
        if force:
            seed["force"] = True
        return self.push_many([seed], max_queue=max_queue, timeout=timeout)

    def push_many(self, seeds: Iterable[SeedLike], *, max_queue: int | None = None,
                  timeout: float | None = None) -> PushResult:
        """Queue every seed: a URL, seed JSON text, or a dict like ``{"url", "priority", "meta", "force"}``."""
        if max_queue is not None and max_queue < 1:
            raise ValueError(f"max_queue={max_queue!r} must be >= 1")
        deadline = None if timeout is None else time.monotonic() + timeout
        result = PushResult()
        pending: list[Push] = []
        for raw in seeds:
            try:
                pending.extend(self.prepare(raw))
            except SeedError as exc:
                result.rejections.append((_seed_text(raw), str(exc)))
                continue
            if len(pending) >= self.BATCH:
                self._drain(pending, result, max_queue, deadline)
        self._drain(pending, result, max_queue, deadline)
        return result

    def prepare(self, raw: SeedLike) -> list[Push]:
        """Validate one seed and build its queue entries; raise SeedError with the reason.

        The requests are the spider's own (``make_request_from_data``, which
        validates with ``parse_seed``), so their payloads equal the workers'.
        """
        if isinstance(raw, Mapping):
            try:
                raw = json.dumps(dict(raw))
            except (TypeError, ValueError) as exc:
                raise SeedError(f"seed is not JSON-serializable: {exc}") from None
        data = raw.encode() if isinstance(raw, str) else raw
        try:
            requests = list(self.spider.make_request_from_data(data))
        except ValueError as exc:  # SeedError, or a URL that Request refuses
            raise SeedError(str(exc) if isinstance(exc, SeedError) else f"not a URL: {exc}") from None
        return [self._push(request) for request in requests]

    def _push(self, request: Request) -> Push:
        try:
            return push_row(request, self.spider, self.dupefilter.fingerprint(request), self.rules)
        except codec.PayloadError as exc:
            raise SeedError(str(exc)) from None

    # -- internals ----------------------------------------------------------------
    def _drain(self, pending: list[Push], result: PushResult, max_queue: int | None,
               deadline: float | None) -> None:
        while pending:
            room = self._wait_for_room(max_queue, deadline, result)
            chunk = pending[:room]
            del pending[:room]
            box = Outbox(pushes=chunk)
            sent = self._call(lambda: self.store.exchange(box, self.params, pop=0))
            result.added += sent.new
            result.skipped += sent.duplicates

    def _wait_for_room(self, max_queue: int | None, deadline: float | None, result: PushResult) -> int:
        """How many requests may be pushed now; waits while the queue holds max_queue or more."""
        if max_queue is None:
            return self.BATCH
        while True:
            queued = self._call(lambda: read_figures(self.server, self.keys).queued)
            if queued < max_queue:
                return min(self.BATCH, max_queue - queued)
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueFullTimeout(f"{self.keys.prefix}: {queued} requests queued, "
                                       f"max_queue={max_queue}", result)
            time.sleep(self.POLL_S)

    def _call(self, fn: Any) -> Any:
        try:
            return fn()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise ConnectionError(f"cannot reach Redis at {self.redis_url}: {exc}") from None


def _seed_text(raw: SeedLike) -> str:
    if isinstance(raw, bytes):
        text = raw.decode("utf-8", "replace")
    elif isinstance(raw, Mapping):
        text = json.dumps(dict(raw), default=repr)
    else:
        text = str(raw)
    return text if len(text) <= 500 else text[:500] + "..."
