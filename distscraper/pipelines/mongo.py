"""MongoDB item pipeline: batched writes, once per key, off the reactor, kept through outages.

:class:`MongoPipeline` guarantees:

* an item's processing completes only once MongoDB has acknowledged the bulk
  write holding it, so whatever waits for item processing (the frontier's
  acknowledgement of a request) never runs ahead of storage;
* items are stored once per ``MONGO_UNIQUE_KEY``, which gets a unique index at
  start-up: inserted, or, when the key is stored already (a page fetched again),
  upserted with ``$set``, so the document ends as upserting every item would
  leave it. Batches of up to ``MONGO_BATCH_SIZE`` are written at most
  ``MONGO_FLUSH_INTERVAL`` seconds after the oldest buffered item arrived, one
  write at a time, in a thread of the pipeline's own (the reactor never blocks);
  items of one batch sharing a key become one write of their fields merged in
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

This module is the Scrapy-facing part: settings, start-up, back-pressure, close.
:mod:`.mongo_writer` buffers and writes; :mod:`.mongo_batch`, :mod:`.mongo_outage`
and :mod:`.mongo_client` say what a write and a failure mean and how to reach MongoDB.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy.utils.defer import maybe_deferred_to_future

from distscraper.pipelines.mongo_batch import ItemNotStored
from distscraper.pipelines.mongo_client import LOGGER_NAME, MongoConfig, MongoThread, describe
from distscraper.pipelines.mongo_writer import MongoWriter

if TYPE_CHECKING:
    from collections.abc import Callable

    from pymongo import MongoClient
    from scrapy import Spider
    from scrapy.core.engine import ExecutionEngine
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

__all__ = ["ItemNotStored", "MongoConfig", "MongoPipeline", "MongoStartupError"]

logger = logging.getLogger(LOGGER_NAME)


class MongoStartupError(RuntimeError):
    """MongoDB cannot be used at start-up, so the crawl does not start."""


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
        self._writer: MongoWriter | None = None
        self._pool: MongoThread | None = None  # the thread of every MongoDB call
        self._paused = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, MongoConfig.from_settings(crawler.settings))

    # --- Scrapy interface -----------------------------------------------------
    async def open_spider(self, spider: Spider | None = None) -> None:
        """Connect, ping and create the unique index; raise MongoStartupError if that fails."""
        spider = spider or self.crawler.spider
        name = self.config.collection or spider.name
        self._pool = MongoThread()
        try:
            self._client, collection = await maybe_deferred_to_future(
                self._in_thread(self.config.connect, name))
        except Exception as exc:
            self._stop_pool()
            message = (f"MongoDB at {self.config.masked_uri} cannot be used ({describe(exc)}): "
                       f"items could not be stored, so the crawl does not start. "
                       f"Check MONGO_URI and that MongoDB is running.")
            logger.error(message)
            raise MongoStartupError(message) from None
        self._writer = MongoWriter(
            self.config, collection, self._in_thread, self.crawler.stats,
            grew=self._buffer_grew, shrank=self._maybe_unpause, crawl_closing=self._crawl_closing)
        logger.info("Storing items in MongoDB at %s, collection %s.%s, one document per %r",
                    self.config.masked_uri, self.config.database, name, self.config.unique_key)

    async def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Return *item* once MongoDB has stored it (see :meth:`write`)."""
        return await maybe_deferred_to_future(self.write(item))

    async def close_spider(self, spider: Spider | None = None) -> None:
        """Write everything buffered, wait for it, then disconnect.

        While MongoDB stays unreachable this waits at most ``MONGO_CLOSE_TIMEOUT``
        seconds (plus one attempt), then gives up on the unwritten items.
        """
        if self._pool is None or not self._pool.running:
            return  # never opened, already closed, or the reactor stopped the thread
        writer = self._writer
        if writer is not None:
            await maybe_deferred_to_future(writer.drain())
            writer.stop()
        self._writer = None
        client, self._client = self._client, None
        if client is not None:
            await maybe_deferred_to_future(self._in_thread(client.close))
        self._stop_pool()

    def write(self, item: Any) -> Deferred[Any]:
        """Buffer *item*; the Deferred fires with it once MongoDB acknowledged its write.

        It fails with DropItem when the item can never be stored, and with
        ItemNotStored when a closing crawl gave up on MongoDB.
        """
        if self._writer is None:
            raise RuntimeError("MongoPipeline.write() before open_spider() or after close_spider()")
        return self._writer.add(item)

    # --- back-pressure --------------------------------------------------------
    def _buffer_grew(self, unwritten: int) -> None:
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

    def _maybe_unpause(self, unwritten: int) -> None:
        if not self._paused or unwritten >= self.config.buffer_max / 2:
            return
        self._paused = False
        engine = self._engine()
        if engine is not None:
            engine.unpause()
        logger.info("MongoDB caught up (%d items unwritten): crawling resumed", unwritten)

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

    def _engine(self) -> ExecutionEngine | None:
        try:
            return self.crawler.engine
        except (AttributeError, RuntimeError):  # not created yet
            return None

    # --- the MongoDB thread ---------------------------------------------------
    def _in_thread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Deferred[Any]:
        assert self._pool is not None
        return self._pool.run(f, *args, **kwargs)

    def _stop_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
