"""The MongoDB pipeline's write machinery: a buffer flushed by one bulk write at a time.

:class:`MongoWriter` guarantees: an item's Deferred fires with the item only once
MongoDB acknowledged the bulk write holding it (DropItem if it can never be
stored, :class:`ItemNotStored` if a closing crawl gave up); a batch is written
when full, ``MONGO_FLUSH_INTERVAL`` after its oldest item, or at once while
closing, one write at a time through the thread runner it was given; a failed
write is retried with back-off (:mod:`.mongo_outage`), nothing dropped, until a
closing crawl passes ``MONGO_CLOSE_TIMEOUT``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from pymongo.errors import BulkWriteError
from scrapy.exceptions import DropItem
from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

from distscraper.pipelines import mongo_batch as batching
from distscraper.pipelines.mongo_batch import ItemNotStored
from distscraper.pipelines.mongo_client import LOGGER_NAME, MongoConfig, reactor
from distscraper.pipelines.mongo_outage import Outage

if TYPE_CHECKING:
    from collections.abc import Callable

    from pymongo.collection import Collection
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.interfaces import IDelayedCall

    from distscraper.pipelines.mongo_batch import Entry, Group

logger = logging.getLogger(LOGGER_NAME)


class MongoWriter:
    """Buffer items and write them into *collection* in batches, through outages.

    *run* runs a blocking call in the writer's thread and returns its Deferred.
    *grew* and *shrank* get the number of unwritten items after it grew or a
    write ended; *crawl_closing* says whether Scrapy is closing the spider.
    """

    def __init__(self, config: MongoConfig, collection: Collection[dict[str, Any]],
                 run: Callable[..., Deferred[Any]], stats: StatsCollector, *,
                 grew: Callable[[int], None], shrank: Callable[[int], None],
                 crawl_closing: Callable[[], bool]) -> None:
        self.config = config
        self._collection: Collection[dict[str, Any]] | None = collection  # None once stopped
        self._run = run
        self._stats = stats
        self._grew, self._shrank, self._crawl_closing = grew, shrank, crawl_closing
        self._outage = Outage(config)
        self._pending: list[Entry] = []  # buffered, not yet part of a write
        self._batch: list[Entry] | None = None  # being written, or waiting for a retry
        self._flush_call: IDelayedCall | None = None
        self._retry_call: IDelayedCall | None = None
        self._closing = False
        self._drained: list[Deferred[None]] = []

    @property
    def unwritten(self) -> int:
        return len(self._pending) + len(self._batch or ())

    def add(self, item: Any) -> Deferred[Any]:
        """Buffer *item*; the Deferred fires with it once MongoDB acknowledged its write."""
        entry = batching.entry_for(item, self.config.unique_key)
        if isinstance(entry, DropItem):
            self._stats.inc_value("mongo/items_rejected")
            return fail(entry)
        self._pending.append(entry)
        self._grew(self.unwritten)
        self._schedule()
        return entry.deferred

    def drain(self) -> Deferred[None]:
        """Close: write everything at once; fires when nothing is unwritten (stored or given up)."""
        self._closing = True
        if not self.unwritten:
            return succeed(None)
        logger.info("Writing %d buffered items to MongoDB before closing", self.unwritten)
        drained: Deferred[None] = Deferred()
        self._drained.append(drained)
        self._schedule()
        return drained

    def stop(self) -> None:
        """Cancel the timers and write nothing more."""
        for call in (self._flush_call, self._retry_call):
            if call is not None and call.active():
                call.cancel()
        self._collection = None

    # --- batching -------------------------------------------------------------
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
            self._flush_call = reactor().callLater(due_at - now, self._on_flush_timer)

    def _on_flush_timer(self) -> None:
        self._flush_call = None
        self._schedule()

    def _cancel_flush(self) -> None:
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None

    def _attempt(self) -> None:
        """Write the current batch: one insert (or upsert) per unique key."""
        self._retry_call = None
        assert self._batch is not None and self._collection is not None
        groups = batching.group(self._batch)
        ops = batching.writes(groups, self.config.unique_key)
        d = self._run(self._collection.bulk_write, ops, ordered=False)
        d.addCallbacks(self._written, self._failed, callbackArgs=(groups,), errbackArgs=(groups,))
        d.addErrback(self._internal_error)

    def _written(self, _result: Any, groups: list[Group]) -> None:
        self._batch = None
        self._batch_done()
        self._store([e for g in groups for e in g])
        self._after_write()

    def _failed(self, failure: Failure, groups: list[Group]) -> None:
        exc = failure.value
        conflicts_only = batching.only_conflicts(exc)
        self._stats.inc_value("mongo/duplicate_keys" if conflicts_only else "mongo/write_errors")
        if isinstance(exc, BulkWriteError):
            stored, retry, refused = batching.sort_out(exc.details, groups)
            for group, error in refused:
                self._stats.inc_value("mongo/items_rejected", len(group))
                batching.refuse(group, error)
            self._store(stored)
        else:
            retry = [e for g in groups for e in g]
        if not retry:  # a partial success: nothing left to write
            self._batch = None
            self._batch_done()
            self._after_write()
            return
        self._batch = retry
        if conflicts_only:  # keys already stored: upsert them now, no back-off
            self._attempt()
            return
        self._outage.failed(failure, self.unwritten)
        self._schedule_retry()

    def _batch_done(self) -> None:
        self._stats.inc_value("mongo/batches")
        self._outage.succeeded(self.unwritten)

    def _after_write(self) -> None:
        self._shrank(self.unwritten)
        self._schedule()
        if not self.unwritten and self._drained:
            waiters, self._drained = self._drained, []
            for d in waiters:
                d.callback(None)

    def _store(self, entries: list[Entry]) -> None:
        if entries:
            self._stats.inc_value("mongo/items_written", len(entries))
        batching.resolve(entries)

    # --- outages --------------------------------------------------------------
    def _schedule_retry(self) -> None:
        delay = self._outage.next_delay(self._closing or self._crawl_closing())
        if delay is None:
            self._give_up()
            return
        self._stats.inc_value("mongo/retries")
        self._retry_call = reactor().callLater(delay, self._attempt)

    def _give_up(self) -> None:
        entries = (self._batch or []) + self._pending
        self._batch, self._pending = None, []
        self._cancel_flush()
        self._outage.gave_up(len(entries))
        self._stats.inc_value("mongo/items_unwritten", len(entries))
        for entry in entries:
            batching.fail(entry, ItemNotStored())
        self._after_write()

    @staticmethod
    def _internal_error(failure: Failure) -> None:
        logger.error("MongoPipeline bug while handling a bulk write", exc_info=(
            failure.type, failure.value, failure.getTracebackObject()))
