"""One worker's view of the shared frontier.

A :class:`Frontier` belongs to one crawler. The scheduler, the tracking spider
middleware, the retry middleware and the spider all reach it through
:meth:`Frontier.of`. It guarantees:

* every popped request is *leased*: it stays in Redis until this worker sends
  its ack, retry, dead letter or return, or until the lease expires and any
  node puts it back in the queue;
* an ack is sent only in the same round trip as, or after, every request the
  page produced (follow-up requests are pushed before acks inside one script);
* changes are buffered and sent in one round trip per pop batch or per tick,
  from a thread so the reactor never waits for Redis; round trips reach Redis
  one at a time, in the order their changes were made; changes are kept
  (never dropped) while Redis is unreachable.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterable
from weakref import WeakKeyDictionary

import redis
from scrapy import Request, Spider
from scrapy.utils.misc import load_object
from twisted.internet import task
from twisted.internet.threads import deferToThread

from distscraper import defaults
from distscraper.frontier import codec
from distscraper.frontier.connection import redis_from_settings
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.known import KnownFingerprints
from distscraper.frontier.leases import LEASE_META, LeaseBook
from distscraper.frontier.outage import Outage
from distscraper.frontier.priority import PriorityRules
from distscraper.frontier.seeds import SeedError
from distscraper.frontier.store import ExchangeParams, ExchangeResult, FrontierStore, Outbox, push_row
from distscraper.masking import mask_url

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

MAX_LEASE_PERIODS = 10  # a lease held this long without an outcome is given up
REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


class Frontier:
    """Buffers, leases and round trips of one worker (see module docstring)."""

    _instances: "WeakKeyDictionary[Crawler, Frontier]" = WeakKeyDictionary()

    @classmethod
    def of(cls, crawler: "Crawler") -> "Frontier":
        """The crawler's frontier, created on first use."""
        if crawler not in cls._instances:
            cls._instances[crawler] = cls(crawler)
        return cls._instances[crawler]

    def __init__(self, crawler: "Crawler") -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.server = redis_from_settings(settings)
        self.redis_url = mask_url(defaults.get(settings, "REDIS_URL"))
        self.key_template = defaults.get(settings, "FRONTIER_KEY_PREFIX")
        df_cls = load_object(settings.get("DUPEFILTER_CLASS"))
        if not hasattr(df_cls, "lua_prelude"):
            raise ValueError(
                f"setting DUPEFILTER_CLASS={settings.get('DUPEFILTER_CLASS')!r} is not a distscraper "
                "dupefilter (use distscraper.frontier.dupefilter.RedisDupeFilter or BloomDupeFilter)")
        self.dupefilter = df_cls.from_crawler(crawler)
        timeout = settings.getfloat("DOWNLOAD_TIMEOUT")
        lease = defaults.get(settings, "FRONTIER_LEASE_TIME") or timeout + 30
        if lease <= timeout:
            raise ValueError(f"setting FRONTIER_LEASE_TIME={lease!r} must be longer than "
                             f"DOWNLOAD_TIMEOUT={timeout!r}")
        self.lease_s = lease
        self.node = defaults.get(settings, "NODE_ID") or f"{socket.gethostname()}-{os.getpid()}"
        self.params_base = dict(
            node=self.node,
            lease_ms=int(lease * 1000),
            delay_ms=int(settings.getfloat("DOWNLOAD_DELAY") * 1000),
            concurrency=max(0, settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")),
            slot_ttl_ms=int((timeout + 10) * 1000),
            reap_batch=defaults.get(settings, "FRONTIER_REAP_BATCH"),
            recover_ms=int(defaults.get(settings, "THROTTLE_RECOVER_AFTER") * 1000),
            penalty_base_ms=int(defaults.get(settings, "THROTTLE_BACKOFF_BASE") * 1000),
            penalty_max_ms=int(defaults.get(settings, "THROTTLE_BACKOFF_MAX") * 1000),
        )
        self.pop_batch = defaults.get(settings, "FRONTIER_POP_BATCH")
        self.max_leases = (defaults.get(settings, "FRONTIER_MAX_LEASES")
                           or settings.getint("CONCURRENT_REQUESTS"))
        self.push_batch = defaults.get(settings, "FRONTIER_PUSH_BATCH")
        self.tick_s = defaults.get(settings, "FRONTIER_TICK")
        self.seed_batch = defaults.get(settings, "FRONTIER_SEED_BATCH")
        self.max_idle = defaults.get(settings, "MAX_IDLE_TIME_BEFORE_CLOSE")
        self.known = KnownFingerprints(defaults.get(settings, "FRONTIER_LOCAL_SEEN"),
                                       defaults.get(settings, "DUPEFILTER_TTL"))
        self.priority_rules = PriorityRules.from_setting(defaults.get(settings, "FRONTIER_PRIORITY_RULES"))
        self.spider: Spider | None = None
        self.keys: FrontierKeys | None = None
        self.store: FrontierStore | None = None
        self.outbox = Outbox()
        self.leases = LeaseBook(self.outbox)
        self.ready: deque[Request] = deque()
        self.outage = Outage(self.redis_url, defaults.get(settings, "FRONTIER_REDIS_BACKOFF_MAX"))
        self._seed_handler: Callable[[bytes], Iterable[Request]] | None = None
        self._next_pop_at = 0.0  # before this, an empty queue stays empty (or a tick will see)
        self._no_work_since: float | None = None
        self._wake_call: Any = None
        self._ack_call: Any = None
        self._loops: list[task.LoopingCall] = []
        self._send_lock = threading.Lock()  # held from taking an outbox until Redis answered
        self._answer: tuple[Outbox, int, ExchangeResult | Exception, float] | None = None
        self._pop_asked = 0  # a pop asked for while a round trip was on its way: follows it

    @property
    def stats(self) -> Any:
        return self.crawler.stats  # set only once the crawl starts

    # -- life cycle --------------------------------------------------------------
    def open(self, spider: Spider) -> None:
        """Connect (failing fast if Redis is unreachable) and start the background ticks."""
        if self.spider is not None:
            return
        self.spider = spider
        self.keys = FrontierKeys.for_spider(spider.name, self.key_template)
        try:
            self.server.ping()
        except redis.RedisError as exc:
            raise ConnectionError(f"cannot reach Redis at {self.redis_url}: {exc}") from None
        self.store = FrontierStore(self.server, self.keys, self.dupefilter.lua_prelude())
        if defaults.get(self.crawler.settings, "FRONTIER_FLUSH_ON_START"):
            self.flush_all_keys()
        self._start_loop(self.tick, self.tick_s)
        self._start_loop(self.renew, max(self.lease_s / 3, self.tick_s))
        logger.info("Frontier %s on %s, node %s, lease %.0fs", self.keys.prefix, self.redis_url,
                    self.node, self.lease_s)

    def _start_loop(self, fn: Callable[[], None], interval: float) -> None:
        loop = task.LoopingCall(fn)
        loop.start(interval, now=False).addErrback(
            lambda f: logger.error("frontier loop failed: %s", f.getTraceback()))
        self._loops.append(loop)

    def close(self) -> None:
        """Send everything buffered, then give every unfinished lease back to the queue."""
        for loop in self._loops:
            if loop.running:
                loop.stop()
        for call in (self._wake_call, self._ack_call):
            if call is not None and call.active():
                call.cancel()
        with self._send_lock:  # a round trip in a thread: take its leases, to give them back
            self._settle()
        self.leases.return_all()
        self.ready.clear()
        deadline = time.monotonic() + 10
        while len(self.outbox) and time.monotonic() < deadline:
            self.outage.retry_at = 0
            if self._exchange(pop=0) is None:
                time.sleep(0.5)
        if len(self.outbox):
            logger.error("Redis unreachable at close: %d changes not sent; their leases will "
                         "expire and other workers will redo them", len(self.outbox))

    def flush_all_keys(self) -> int:
        """Delete every key of this spider's frontier (explicit flush only)."""
        assert self.keys is not None
        n = 0
        for pattern in self.keys.all_patterns():
            for key in self.server.scan_iter(match=pattern, count=1000):
                n += self.server.delete(key)
        logger.warning("Flushed %d frontier keys of %s", n, self.keys.prefix)
        return n

    def set_seed_handler(self, handler: Callable[[bytes], Iterable[Request]]) -> None:
        """*handler* turns one raw seed into requests, or raises SeedError."""
        self._seed_handler = handler

    # -- producing -------------------------------------------------------------------
    def push(self, request: Request) -> None:
        """Queue *request* for the shared frontier (deduplicated in Redis unless dont_filter)."""
        parent = request.meta.get(LEASE_META)
        fp = self.dupefilter.fingerprint(request)
        if not request.dont_filter and self.known.seen(fp):
            # This worker already sent it to the shared seen-set: no need to encode and send it again.
            self.outbox.count("duplicates")
            self.stats.inc_value("frontier/duplicates_local")
        else:
            self._push_new(request, fp)
        if parent is not None:
            # A request the downloader turned into another (redirect, Scrapy retry):
            # the new one is queued in the same round trip as the old one's ack.
            self.leases.finalize(parent, "ack")
            request.meta.pop(LEASE_META, None)

    def _push_new(self, request: Request, fp: bytes) -> None:
        try:
            row = push_row(request, self.spider, fp, self.priority_rules)
        except codec.PayloadError as exc:
            logger.error("Cannot queue %s: %s", request, exc)
            self.outbox.count("unserializable")
            return
        self.outbox.pushes.append(row)
        if len(self.outbox.pushes) >= self.push_batch:
            self._exchange_soon(pop=0)

    # -- consuming -------------------------------------------------------------------
    def pop(self) -> Request | None:
        """The next leased request for this worker, or None (the engine is asked again when
        requests arrive). The buffer is refilled in the background before it runs dry.
        None too while FRONTIER_MAX_LEASES handed-out requests are not parsed yet (the engine
        is asked again when one is done)."""
        if len(self.leases) - len(self.ready) - self.leases.storing >= self.max_leases:
            return None
        if self._running_low() and (self.outbox.pushes or time.monotonic() >= self._next_pop_at):
            self._exchange_soon(pop=self.pop_batch)
        return self.ready.popleft() if self.ready else None

    def _running_low(self) -> bool:
        """Half the leased buffer is used up: time to lease the next batch."""
        return len(self.ready) <= self.pop_batch // 2

    def _accept(self, result: ExchangeResult) -> None:
        assert self.spider is not None
        for payload, token, domain in result.popped:
            try:
                request = codec.decode(payload, self.spider)
            except codec.PayloadError as exc:
                logger.warning("Quarantined an undecodable queue entry: %s", exc)
                self.outbox.quarantine.append((payload, f"cannot decode: {exc}"))
                if token:
                    self.outbox.slot_releases.append((domain, token))
                continue
            self.leases.add(request, payload, domain, token)
            self.ready.append(request)
        for raw in result.seeds:
            self._accept_seed(raw)

    def _accept_seed(self, raw: bytes) -> None:
        assert self._seed_handler is not None  # seeds are read only with a handler
        try:
            requests = list(self._seed_handler(raw))
        except SeedError as exc:
            text = raw.decode("utf-8", "replace")
            logger.warning("Rejected seed %.200r: %s", text, exc)
            self.outbox.seed_invalid.append(FrontierStore.record(seed=text, reason=str(exc), at=time.time()))
            self.stats.inc_value("frontier/seeds_invalid")
        else:
            for request in requests:
                self.push(request)
            self.stats.inc_value("frontier/seeds", len(requests))
        self.outbox.seed_acks.append(raw)

    def slowdown(self, domain: str) -> None:
        """Tell the cluster to back off *domain* (after a 429/503)."""
        self.outbox.slowdowns.append(domain)

    def set_crawl_delay(self, domain: str, seconds: float) -> None:
        self.outbox.crawl_delays.append((domain, int(seconds * 1000)))

    # -- round trips -----------------------------------------------------------------------
    def tick(self) -> None:
        """Background sync: send buffered changes, recover expired work, read seeds."""
        want = 0
        engine = getattr(self.crawler, "engine", None)
        downloader = getattr(engine, "downloader", None)
        if not self.ready and downloader is not None and not downloader.needs_backout():
            want = self.pop_batch
        self._exchange_soon(pop=want, seeds=self.seed_batch if self._seed_handler else 0)

    def renew(self) -> None:
        """Extend the leases of everything this worker still holds."""
        if not self.leases or self.store is None or not self.outage.may_try():
            return
        for lease in self.leases.forget_stale(time.monotonic() - MAX_LEASE_PERIODS * self.lease_s):
            logger.warning("Giving up the lease of %.200r after %d lease periods without an outcome; "
                           "another node will redo it", lease.payload, MAX_LEASE_PERIODS)
        try:
            self.store.renew(self.leases.payloads(), int(self.lease_s * 1000))
        except REDIS_ERRORS as exc:
            self._redis_down(exc)

    def _exchange_soon(self, pop: int = 0, seeds: int = 0) -> None:
        """A round trip in a thread. While one is on its way, changes wait for the next
        one, and a pop asked for now is made as soon as it is back."""
        if self.store is None or not self.outage.may_try():
            return
        if not self._send_lock.acquire(blocking=False):
            self._pop_asked = max(self._pop_asked, pop)
            return
        self._settle()
        box = self.outbox.take()
        deferToThread(self._send, box, pop, seeds, dict(self.leases.slots_held)).addBoth(
            lambda _: self._after_send())

    def _after_send(self) -> None:
        self._settle()
        pop, self._pop_asked = self._pop_asked, 0
        if pop and self._running_low():
            self._exchange_soon(pop=pop)

    def _exchange(self, pop: int = 0, seeds: int = 0) -> ExchangeResult | None:
        """A round trip now, after the one on its way (used when closing)."""
        if self.store is None or not self.outage.may_try():
            return None
        self._send_lock.acquire()
        self._settle()
        self._send(self.outbox.take(), pop, seeds, dict(self.leases.slots_held))
        return self._settle()

    def _send(self, box: Outbox, pop: int, seeds: int, slots_held: dict[str, int]) -> None:
        """Run the exchange script (in any thread); the caller holds the send lock."""
        started = time.perf_counter()
        try:
            outcome: ExchangeResult | Exception = self.store.exchange(  # type: ignore[union-attr]
                box, ExchangeParams(**self.params_base), pop=pop, seeds=seeds,
                slots_held=slots_held)
        except Exception as exc:  # noqa: BLE001 - kept and retried, never lost
            outcome = exc
        self._answer = (box, pop, outcome, (time.perf_counter() - started) * 1000)
        self._send_lock.release()

    def _settle(self) -> ExchangeResult | None:
        """Apply the answer of the last round trip, in the reactor thread."""
        answer, self._answer = self._answer, None
        if answer is None:
            return None
        box, pop, result, took_ms = answer
        if isinstance(result, Exception):
            if not isinstance(result, REDIS_ERRORS):
                logger.error("Frontier exchange failed; its changes are kept and retried: %r", result)
            self.outbox.put_back(box)
            self._redis_down(result)
            return None
        self.outage.succeeded()
        self.stats.inc_value("frontier/round_trips")
        self.stats.inc_value("frontier/exchange_ms", round(took_ms, 3))
        self.stats.max_value("frontier/exchange_max_ms", round(took_ms, 3))
        if result.new:
            self.stats.inc_value("frontier/enqueued", result.new)
        if result.duplicates:
            self.stats.inc_value("frontier/duplicates", result.duplicates)
        if result.reaped:
            self.stats.inc_value("frontier/reaped", result.reaped)
            logger.info("Returned %d expired leases to the queue", result.reaped)
        self._accept(result)
        self._track_idle(result)
        if result.popped or result.seeds:
            self._poke_engine()
        elif pop:
            # Nothing to lease now: ask again when the next domain is due, or at the next tick.
            wait = min(result.wake_ms / 1000, self.tick_s) if result.wake_ms >= 0 else self.tick_s
            self._next_pop_at = time.monotonic() + max(wait, 0.005)
            if result.wake_ms >= 0:
                self._schedule_wake(result.wake_ms / 1000)
        return result

    def _redis_down(self, exc: Exception) -> None:
        self.stats.inc_value("frontier/redis_errors")
        self.outage.failed(exc, len(self.outbox))

    def _track_idle(self, result: ExchangeResult) -> None:
        busy = result.work > 0 or self.leases or len(self.outbox)
        if busy:
            self._no_work_since = None
        elif self._no_work_since is None:
            self._no_work_since = time.monotonic()

    def cluster_idle_for(self) -> float:
        """Seconds the whole cluster has had no work at all, as seen by this worker."""
        if self._no_work_since is None or self.leases or len(self.outbox) or self.ready:
            return 0.0
        return time.monotonic() - self._no_work_since

    def should_close(self) -> bool:
        return self.max_idle > 0 and self.cluster_idle_for() >= self.max_idle

    def ack_soon(self) -> None:
        """A lease progressed (parsed, stored): at the end of this reactor turn, send its
        acks in one round trip (unless one is on its way), so a worker that dies holds as
        few finished pages as possible, and let the engine ask for more requests."""
        from twisted.internet import reactor  # the reactor Scrapy installed

        if self._ack_call is None or not self._ack_call.active():
            self._ack_call = reactor.callLater(0, self._send_acks)

    def _send_acks(self) -> None:
        if self.outbox.acks:
            # The same round trip refills the buffer when it runs low (as pop() would).
            self._exchange_soon(pop=self.pop_batch if self._running_low() else 0)
        self._poke_engine()  # room under FRONTIER_MAX_LEASES again

    def _schedule_wake(self, delay: float) -> None:
        from twisted.internet import reactor  # the reactor Scrapy installed

        if self._wake_call is not None and self._wake_call.active():
            if self._wake_call.getTime() - reactor.seconds() <= delay:
                return
            self._wake_call.cancel()
        self._wake_call = reactor.callLater(max(delay, 0.005), self._poke_engine)

    def _poke_engine(self) -> None:
        """Ask the engine to call next_request() again (it otherwise waits up to 5 s)."""
        slot = getattr(getattr(self.crawler, "engine", None), "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

