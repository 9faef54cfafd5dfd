"""Spider middleware that acknowledges a leased request when its work is durable.

A request's lease ends with an ack once (1) the spider's output for its
response is exhausted, so every follow-up request is in the push buffer, and
(2) every item it produced has passed the item pipelines (the MongoDB pipeline
fires ``item_scraped`` only after the write). The ack travels in the same
Lua round trip as, or a later one than, the follow-up requests, sent at the end
of the reactor turn in which it became due (unless a round trip is on its way). An item dropped
with :class:`NotDurable` (not stored, e.g. MongoDB down while closing) gives the
request back to the queue instead, so it is crawled again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable

from scrapy import Request, Spider, signals
from scrapy.exceptions import DropItem
from scrapy.http import Response

from distscraper.frontier.client import Frontier
from distscraper.frontier.leases import LEASE_META

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class NotDurable(DropItem):
    """An item that could not be stored: its request must not be acknowledged."""


class LeaseTrackerMiddleware:
    """Counts each leased response's outputs and acks it when they are stored."""

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier

    @classmethod
    def from_crawler(cls, crawler: "Crawler") -> "LeaseTrackerMiddleware":
        mw = cls(Frontier.of(crawler))
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(mw.item_finished, signal=signal)
        crawler.signals.connect(mw.request_left_downloader, signal=signals.request_left_downloader)
        return mw

    def request_left_downloader(self, request: Request, spider: Spider | None = None) -> None:
        self.frontier.leases.release_slot(request)

    def item_finished(self, item: Any, response: Response | None = None,
                      exception: BaseException | None = None, **_: Any) -> None:
        request = getattr(response, "request", None)
        if request is None:
            return
        if isinstance(exception, NotDurable):
            self.frontier.leases.end(request, "return")
        else:
            self.frontier.leases.item_finished(request)
            self.frontier.ack_soon()

    def _see(self, response: Response, output: Any) -> None:
        if isinstance(output, Request):
            output.meta.pop(LEASE_META, None)  # a new request, not a continuation of this one
        elif output is not None:
            self.frontier.leases.item_started(response.request)

    def process_spider_output(self, response: Response, result: Iterable[Any],
                              spider: Spider | None = None) -> Iterable[Any]:
        try:
            for output in result:
                self._see(response, output)
                yield output
        finally:
            self.frontier.leases.outputs_done(response.request)
            self.frontier.ack_soon()

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any],
                                          spider: Spider | None = None) -> AsyncIterator[Any]:
        try:
            async for output in result:
                self._see(response, output)
                yield output
        finally:
            self.frontier.leases.outputs_done(response.request)
            self.frontier.ack_soon()

    def process_spider_exception(self, response: Response, exception: Exception,
                                 spider: Spider | None = None) -> None:
        self.frontier.leases.outputs_done(response.request)
        self.frontier.ack_soon()
