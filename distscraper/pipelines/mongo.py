"""MongoDB item pipeline: batched upserts, written off the reactor, kept through outages.

:class:`MongoPipeline` guarantees:

* an item's processing completes only once MongoDB has acknowledged the bulk
  write holding it, so whatever waits for item processing (the frontier's
  acknowledgement of a request) never runs ahead of storage;
* items are upserted (``$set``) on ``MONGO_UNIQUE_KEY``, which gets a unique
  index at start-up, in batches of up to ``MONGO_BATCH_SIZE`` written at most
  ``MONGO_FLUSH_INTERVAL`` seconds after the oldest buffered item arrived, one
  write at a time, in a thread of the pipeline's own (the reactor never blocks);
  items of one batch sharing a key become one upsert of their fields merged in
  arrival order, which stores what writing them one by one would;
* while MongoDB is unreachable nothing is dropped: the batch is retried with
  exponential back-off, crawling pauses once ``MONGO_BUFFER_MAX`` items are
  unwritten and resumes when fewer than half of that are;
* start-up fails, and ``scrapy crawl`` exits non-zero, when MongoDB cannot be
  used; the error names the URI with its password masked;
* a closing crawl keeps retrying for ``MONGO_CLOSE_TIMEOUT`` seconds, then gives
  up on the unwritten items (:class:`ItemNotStored`, one ERROR line): the
  requests behind them are not acknowledged and are crawled again.

An item is dropped (:class:`~scrapy.exceptions.DropItem`) only when it can never
be stored: it lacks the unique key, is not encodable as BSON or too large, or
MongoDB refuses it with a non-transient error (logged at ERROR).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Self

import bson
from bson.errors import BSONError
from itemadapter import ItemAdapter
from pymongo import MongoClient, UpdateOne
from pymongo.errors import BulkWriteError, ConnectionFailure
from scrapy.exceptions import DropItem
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred, fail
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from distscraper import defaults
from distscraper.frontier.tracker import NotDurable
from distscraper.masking import mask_url

if TYPE_CHECKING:
    from collections.abc import Callable

    from pymongo.collection import Collection
    from scrapy import Spider
    from scrapy.core.engine import ExecutionEngine
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.internet.interfaces import IDelayedCall

logger = logging.getLogger(__name__)

#: The largest document MongoDB stores.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
#: Duplicate-key errors: an upsert that raced another one on the same key.
DUPLICATE_KEY_CODES = frozenset({11000, 11001})
#: Attempts an item gets while its upsert keeps hitting duplicate-key errors.
MAX_CONFLICT_ATTEMPTS = 5
#: Per-operation error codes of transient server states, retried like an outage.
TRANSIENT_CODES = frozenset({6, 7, 24, 50, 64, 89, 91, 112, 189, 262, 9001, 10107, 11600,
                             11602, 13435, 13436})


class MongoStartupError(RuntimeError):
    """MongoDB cannot be used at start-up, so the crawl does not start."""


class ItemNotStored(NotDurable):
    """A closing crawl gave up on the item because MongoDB stayed unreachable.

    Its request must not be acknowledged: it is crawled again.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, log_level="DEBUG")  # one ERROR line covers all of them


@dataclass(frozen=True)
class MongoConfig:
    """The validated ``MONGO_*`` settings (attribute ``x`` is setting ``MONGO_X``)."""

    uri: str
    database: str
    collection: str
    unique_key: str
    batch_size: int
    flush_interval: float
    buffer_max: int
    retry_base: float
    retry_max: float
    connect_timeout: float
    close_timeout: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> MongoConfig:
        return cls(**{f.name: defaults.get(settings, "MONGO_" + f.name.upper())
                      for f in fields(cls)})

    @property
    def masked_uri(self) -> str:
        return mask_url(self.uri)


@dataclass(eq=False)
class _Entry:
    """One buffered item; ``deferred`` fires once it is stored (or given up)."""

    item: Any
    key: Any
    doc: dict[str, Any]
    added: float
    deferred: Deferred[Any] = field(default_factory=Deferred)
    conflicts: int = 0


class MongoPipeline:
    """Upsert items into MongoDB in batches; an item completes once it is stored.

    Scrapy calls :meth:`open_spider`, :meth:`process_item` and
    :meth:`close_spider`. They are coroutines, since Scrapy 2.19 deprecates
    pipeline methods that return Deferreds; :meth:`write` is
    :meth:`process_item` for Deferred-based callers.
    """

    def __init__(self, crawler: Crawler, config: MongoConfig) -> None:
        self.crawler = crawler
        self.config = config
        self._client: MongoClient[dict[str, Any]] | None = None
        self._collection: Collection[dict[str, Any]] | None = None
        self._pool: ThreadPool | None = None
        self._shutdown_trigger: Any = None
        self._pending: list[_Entry] = []  # buffered, not yet part of a write
        self._batch: list[_Entry] | None = None  # being written, or waiting for a retry
        self._flush_call: IDelayedCall | None = None
        self._retry_call: IDelayedCall | None = None
        self._failures = 0  # consecutive failed attempts, for the back-off
        self._failing_since: float | None = None  # set while a logged failure lasts
        self._closing = False
        self._close_deadline: float | None = None
        self._paused = False
        self._drained: list[Deferred[None]] = []

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, MongoConfig.from_settings(crawler.settings))

    # --- Scrapy interface -----------------------------------------------------
    async def open_spider(self, spider: Spider | None = None) -> None:
        """Connect, ping and create the unique index; raise MongoStartupError if that fails."""
        spider = spider or self.crawler.spider
        name = self.config.collection or spider.name
        self._pool = ThreadPool(1, 1, name="distscraper-mongo")
        self._pool.start()
        self._shutdown_trigger = _reactor().addSystemEventTrigger(
            "during", "shutdown", self._stop_pool)
        try:
            self._client, self._collection = await maybe_deferred_to_future(
                self._in_thread(self._connect, name))
        except Exception as exc:
            self._stop_pool()
            message = (f"MongoDB at {self.config.masked_uri} cannot be used ({_describe(exc)}): "
                       f"items could not be stored, so the crawl does not start. "
                       f"Check MONGO_URI and that MongoDB is running.")
            logger.error(message)
            raise MongoStartupError(message) from None
        logger.info("Storing items in MongoDB at %s, collection %s.%s, upserting on %r",
                    self.config.masked_uri, self.config.database, name, self.config.unique_key)

    async def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Return *item* once MongoDB has stored it (see :meth:`write`)."""
        return await maybe_deferred_to_future(self.write(item))

    async def close_spider(self, spider: Spider | None = None) -> None:
        """Write everything buffered, wait for it, then disconnect.

        While MongoDB stays unreachable this waits at most ``MONGO_CLOSE_TIMEOUT``
        seconds (plus one attempt), then gives up on the unwritten items.
        """
        if self._pool is None:
            return  # never opened, or already closed
        self._closing = True
        if self._unwritten:
            logger.info("Writing %d buffered items to MongoDB before closing", self._unwritten)
            drained: Deferred[None] = Deferred()
            self._drained.append(drained)
            self._schedule()
            await maybe_deferred_to_future(drained)
        for call in (self._flush_call, self._retry_call):
            if call is not None and call.active():
                call.cancel()
        client, self._client, self._collection = self._client, None, None
        if client is not None:
            await maybe_deferred_to_future(self._in_thread(client.close))
        self._stop_pool()

    def write(self, item: Any) -> Deferred[Any]:
        """Buffer *item*; the Deferred fires with it once MongoDB acknowledged its write.

        It fails with DropItem when the item can never be stored, and with
        ItemNotStored when a closing crawl gave up on MongoDB.
        """
        if self._collection is None:
            raise RuntimeError("MongoPipeline.write() before open_spider() or after close_spider()")
        doc = ItemAdapter(item).asdict()
        key = doc.get(self.config.unique_key)
        problem = self._unstorable(doc, key)
        if problem is not None:
            self._inc("mongo/items_rejected")
            return fail(DropItem(f"Item not stored in MongoDB: {problem}"))
        entry = _Entry(item, key, doc, time.monotonic())
        self._pending.append(entry)
        self._buffer_grew()
        self._schedule()
        return entry.deferred

    # --- batching -------------------------------------------------------------
    @property
    def _unwritten(self) -> int:
        return len(self._pending) + len(self._batch or ())

    def _unstorable(self, doc: dict[str, Any], key: Any) -> str | None:
        """Why *doc* can never be stored, or None."""
        if key is None or key == "":
            return (f"it has no {self.config.unique_key!r} field (MONGO_UNIQUE_KEY) "
                    f"to upsert on")
        try:
            size = len(bson.encode(doc))
        except (BSONError, OverflowError, TypeError, ValueError) as exc:
            return f"it cannot be encoded as BSON ({exc})"
        if size > MAX_DOCUMENT_BYTES:
            return f"it is {size} bytes as BSON, over MongoDB's limit of {MAX_DOCUMENT_BYTES}"
        return None

    def _schedule(self) -> None:
        """Start the next write if one is due, else make sure the flush timer runs."""
        if self._batch is not None or self._collection is None:
            return  # the write in progress calls back here when it ends
        if not self._pending:
            self._cancel_flush()
            return
        now = time.monotonic()
        due_at = self._pending[0].added + self.config.flush_interval
        size = self.config.batch_size
        if self._closing or len(self._pending) >= size or now >= due_at:
            self._cancel_flush()
            self._batch, self._pending = self._pending[:size], self._pending[size:]
            self._attempt()
        elif self._flush_call is None:
            self._flush_call = _reactor().callLater(due_at - now, self._on_flush_timer)

    def _on_flush_timer(self) -> None:
        self._flush_call = None
        self._schedule()

    def _cancel_flush(self) -> None:
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None

    def _attempt(self) -> None:
        """Write the current batch: one upsert per unique key.

        Items sharing a key are merged in arrival order (later fields win), which
        stores exactly what writing them one after the other would.
        """
        self._retry_call = None
        assert self._batch is not None and self._collection is not None
        groups = _group(self._batch)
        key = self.config.unique_key
        ops = [UpdateOne({key: g[-1].key}, {"$set": _merged(g)}, upsert=True) for g in groups]
        d = self._in_thread(self._collection.bulk_write, ops, ordered=False)
        d.addCallbacks(self._written, self._failed, callbackArgs=(groups,),
                       errbackArgs=(groups,))
        d.addErrback(self._internal_error)

    def _written(self, _result: Any, groups: list[list[_Entry]]) -> None:
        self._batch = None
        self._batch_done()
        self._store([e for g in groups for e in g])
        self._after_write()

    def _failed(self, failure: Failure, groups: list[list[_Entry]]) -> None:
        self._inc("mongo/write_errors")
        exc = failure.value
        if isinstance(exc, BulkWriteError):
            retry = self._sort_out(exc.details, groups)
        else:
            retry = [e for g in groups for e in g]
        if not retry:  # a partial success: nothing left to write
            self._batch = None
            self._batch_done()
            self._after_write()
            return
        self._batch = retry
        self._report_failure(failure)
        self._schedule_retry()

    def _sort_out(self, details: dict[str, Any], groups: list[list[_Entry]]) -> list[_Entry]:
        """Settle a partly failed bulk write; return the entries to write again."""
        errors = {e["index"]: e for e in details.get("writeErrors", [])}
        unconfirmed = bool(details.get("writeConcernErrors"))
        stored: list[_Entry] = []
        retry: list[_Entry] = []
        for index, group in enumerate(groups):
            error = errors.get(index)
            if error is None:
                (retry if unconfirmed else stored).extend(group)
            elif self._retryable(error, group):
                retry.extend(group)
            else:
                self._reject(group, error)
        self._store(stored)
        return retry

    @staticmethod
    def _retryable(error: dict[str, Any], group: list[_Entry]) -> bool:
        code = error.get("code")
        if code in DUPLICATE_KEY_CODES:  # a concurrent upsert won the insert: retry updates
            for entry in group:
                entry.conflicts += 1
            return max(e.conflicts for e in group) < MAX_CONFLICT_ATTEMPTS
        return code in TRANSIENT_CODES

    def _after_write(self) -> None:
        self._maybe_unpause()
        self._schedule()
        if not self._unwritten and self._drained:
            waiters, self._drained = self._drained, []
            for d in waiters:
                d.callback(None)

    def _store(self, entries: list[_Entry]) -> None:
        if entries:
            self._inc("mongo/items_written", len(entries))
        for entry in entries:
            if not entry.deferred.called:  # it may have been cancelled
                entry.deferred.callback(entry.item)

    def _reject(self, group: list[_Entry], error: dict[str, Any]) -> None:
        self._inc("mongo/items_rejected", len(group))
        reason = f"MongoDB refused it (code {error.get('code')}: {error.get('errmsg')})"
        for entry in group:
            _fail(entry, DropItem(f"Item not stored in MongoDB: {reason}", log_level="ERROR"))

    # --- outages --------------------------------------------------------------
    def _report_failure(self, failure: Failure) -> None:
        """Log the first failure of a streak (the recovery is logged too)."""
        exc = failure.value
        if isinstance(exc, BulkWriteError) and not exc.details.get("writeConcernErrors") and all(
                e.get("code") in DUPLICATE_KEY_CODES for e in exc.details.get("writeErrors", [])):
            logger.debug("Upsert raced another writer (%s); retrying", _describe(exc))
            return
        if self._failing_since is not None:
            return
        self._failing_since = time.monotonic()
        if isinstance(exc, ConnectionFailure):
            logger.warning(
                "MongoDB at %s is unreachable (%s): keeping %d unwritten items and retrying "
                "every %.1f to %.1f s", self.config.masked_uri, _describe(exc), self._unwritten,
                self.config.retry_base, self.config.retry_max)
        elif isinstance(exc, BulkWriteError):
            logger.warning("MongoDB at %s refused writes with a transient error (%s): retrying",
                           self.config.masked_uri, _describe(exc))
        else:
            logger.error("Writing to MongoDB at %s failed (%s): keeping %d unwritten items and "
                         "retrying", self.config.masked_uri, _describe(exc), self._unwritten,
                         exc_info=(type(exc), exc, failure.getTracebackObject()))

    def _batch_done(self) -> None:
        """Account for a completed bulk write and log the end of a failure streak."""
        self._inc("mongo/batches")
        self._failures = 0
        if self._failing_since is not None:
            logger.info("MongoDB at %s accepts writes again after %.1f s; %d items still "
                        "unwritten", self.config.masked_uri,
                        time.monotonic() - self._failing_since, self._unwritten)
            self._failing_since = None

    def _schedule_retry(self) -> None:
        self._failures += 1
        delay = min(self.config.retry_max,
                    self.config.retry_base * 2 ** min(self._failures - 1, 32))
        if self._closing or self._crawl_closing():
            now = time.monotonic()
            if self._close_deadline is None:
                self._close_deadline = now + self.config.close_timeout
            if now >= self._close_deadline:
                self._give_up()
                return
            delay = min(delay, self._close_deadline - now)
        self._inc("mongo/retries")
        self._retry_call = _reactor().callLater(delay, self._attempt)

    def _give_up(self) -> None:
        entries = (self._batch or []) + self._pending
        self._batch, self._pending = None, []
        self._cancel_flush()
        logger.error(
            "MongoDB at %s is still failing %.0f s after the spider began closing: %d items "
            "were not stored; their requests are not acknowledged and will be crawled again",
            self.config.masked_uri, self.config.close_timeout, len(entries))
        self._inc("mongo/items_unwritten", len(entries))
        for entry in entries:
            _fail(entry, ItemNotStored("MongoDB unreachable while closing: item not stored"))
        self._after_write()

    def _crawl_closing(self) -> bool:
        """True once Scrapy is closing the spider.

        Scrapy then waits for every item in progress before it calls
        :meth:`close_spider`, so the close deadline must start here. Stopping
        (a shutdown signal, ``crawler.stop()``) shows as an engine with a spider
        that no longer runs; other closes (``CloseSpider``) as a closing slot.
        """
        engine = self._engine()
        if engine is None or getattr(engine, "spider", None) is None:
            return False
        if not getattr(engine, "running", True):
            return True
        slots = (getattr(engine, "_slot", None), getattr(engine.scraper, "slot", None))
        return any(getattr(slot, "closing", None) is not None for slot in slots)

    # --- back-pressure --------------------------------------------------------
    def _buffer_grew(self) -> None:
        unwritten = self._unwritten
        self.crawler.stats.max_value("mongo/buffer_max", unwritten)
        if unwritten < self.config.buffer_max or self._paused:
            return
        engine = self._engine()
        if engine is not None:
            engine.pause()
            self._paused = True
            logger.warning("%d items wait for MongoDB (MONGO_BUFFER_MAX=%d): crawling paused "
                           "until fewer than half of them are unwritten", unwritten,
                           self.config.buffer_max)

    def _maybe_unpause(self) -> None:
        if not self._paused or self._unwritten >= self.config.buffer_max / 2:
            return
        self._paused = False
        engine = self._engine()
        if engine is not None:
            engine.unpause()
        logger.info("MongoDB caught up (%d items unwritten): crawling resumed", self._unwritten)

    def _engine(self) -> ExecutionEngine | None:
        try:
            return self.crawler.engine
        except (AttributeError, RuntimeError):  # not created yet
            return None

    # --- plumbing -------------------------------------------------------------
    def _connect(self, collection: str) -> tuple[MongoClient[dict[str, Any]],
                                                 Collection[dict[str, Any]]]:
        """In the pool's thread: a client that answered a ping, and the indexed collection."""
        ms = int(self.config.connect_timeout * 1000)
        client: MongoClient[dict[str, Any]] = MongoClient(
            self.config.uri, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms,
            socketTimeoutMS=ms, appname="distscraper")
        try:
            client.admin.command("ping")
            coll = client[self.config.database][collection]
            coll.create_index(self.config.unique_key, unique=True)
        except BaseException:
            client.close()
            raise
        return client, coll

    def _in_thread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Deferred[Any]:
        assert self._pool is not None
        return deferToThreadPool(_reactor(), self._pool, f, *args, **kwargs)

    def _stop_pool(self) -> None:
        pool, self._pool = self._pool, None
        trigger, self._shutdown_trigger = self._shutdown_trigger, None
        if trigger is not None:
            try:
                _reactor().removeSystemEventTrigger(trigger)
            except (ValueError, KeyError):  # already fired
                pass
        if pool is not None:
            pool.stop()

    def _inc(self, name: str, count: int = 1) -> None:
        self.crawler.stats.inc_value(name, count)

    @staticmethod
    def _internal_error(failure: Failure) -> None:
        logger.error("MongoPipeline bug while handling a bulk write", exc_info=(
            failure.type, failure.value, failure.getTracebackObject()))


def _group(entries: list[_Entry]) -> list[list[_Entry]]:
    """Entries grouped by unique key, in order of first appearance."""
    groups: dict[Any, list[_Entry]] = {}
    for entry in entries:
        groups.setdefault(_hashable(entry.key), []).append(entry)
    return list(groups.values())


def _merged(group: list[_Entry]) -> dict[str, Any]:
    if len(group) == 1:
        return group[0].doc
    doc: dict[str, Any] = {}
    for entry in group:
        doc.update(entry.doc)
    return doc


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return ("<unhashable>", repr(value))
    return value


def _fail(entry: _Entry, exc: Exception) -> None:
    if not entry.deferred.called:
        entry.deferred.errback(Failure(exc))


def _describe(exc: BaseException) -> str:
    """A short, password-free description of a MongoDB error."""
    if isinstance(exc, BulkWriteError):
        errors = exc.details.get("writeErrors") or exc.details.get("writeConcernErrors") or [{}]
        text = (f"{len(errors)} write errors, first: code {errors[0].get('code')}: "
                f"{errors[0].get('errmsg')}")
    else:
        text = str(exc).split(", Topology Description:")[0]
    text = text if len(text) <= 300 else text[:297] + "..."
    return mask_url(f"{type(exc).__name__}: {text}")


def _reactor() -> Any:
    from twisted.internet import reactor

    return reactor
