"""MongoPipeline against a real MongoDB-wire server (SecantusDB), driven by a real crawler.

The pipeline's coroutines and Deferreds run on the asyncio reactor's event loop
(installed here if no reactor is yet), with ``loop.run_until_complete``: no
``reactor.run()``, so every test can run the loop again. The pipeline writes in a
thread pool of its own, which needs no running reactor.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pymongo
import pytest
from helpers import REPO_ROOT
from scrapy import Spider
from scrapy.core.engine import ExecutionEngine
from scrapy.exceptions import DropItem
from scrapy.utils.reactor import install_reactor, is_asyncio_reactor_installed, is_reactor_installed
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred, DeferredList

from distscraper.pipelines.mongo import ItemNotStored, MongoPipeline, MongoStartupError
from distscraper.sandbox.servers import MongoServer, free_port

ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
LOGGER = "distscraper.pipelines.mongo"


class ItemsSpider(Spider):
    name = "items"


@pytest.fixture(scope="module")
def loop() -> asyncio.AbstractEventLoop:
    """The asyncio reactor's event loop."""
    if not is_reactor_installed():
        install_reactor(ASYNCIO_REACTOR)
    if not is_asyncio_reactor_installed():
        pytest.fail("these tests need the asyncio reactor, but another reactor is installed")
    from twisted.internet import reactor

    event_loop: asyncio.AbstractEventLoop = reactor._asyncioEventloop  # type: ignore[attr-defined]
    asyncio.set_event_loop(event_loop)
    return event_loop


def run(loop: asyncio.AbstractEventLoop, aw: Awaitable[Any] | Deferred[Any],
        timeout: float = 30.0) -> Any:
    """Run the loop until *aw* completes (or fail after *timeout* seconds)."""
    if isinstance(aw, Deferred):
        aw = aw.asFuture(loop)
    return loop.run_until_complete(asyncio.wait_for(aw, timeout))


def settle(loop: asyncio.AbstractEventLoop, deferreds: list[Deferred[Any]],
           timeout: float = 30.0) -> list[tuple[bool, Any]]:
    """Wait until every Deferred has fired; return DeferredList's (success, result) pairs."""
    return run(loop, DeferredList(deferreds, consumeErrors=True), timeout)


def spin(loop: asyncio.AbstractEventLoop, seconds: float) -> None:
    """Let the loop (timers, thread results) run for *seconds*."""
    run(loop, asyncio.sleep(seconds), seconds + 5)


PipelineFactory = Callable[..., MongoPipeline]


@pytest.fixture
def make_pipeline(loop: asyncio.AbstractEventLoop) -> Iterator[PipelineFactory]:
    """``make_pipeline(uri, database, **settings)``: an opened pipeline on a fresh crawler.

    Pipelines still open after the test are closed (giving up fast on unwritten items).
    """
    pipelines: list[MongoPipeline] = []

    def make(uri: str, database: str, *, engine: bool = False, **settings: Any) -> MongoPipeline:
        crawler = get_crawler(ItemsSpider, {
            "MONGO_URI": uri, "MONGO_DATABASE": database, "MONGO_CONNECT_TIMEOUT": 2.0,
            "MONGO_CLOSE_TIMEOUT": 1.0, "MONGO_RETRY_BASE": 0.05, "MONGO_RETRY_MAX": 0.3,
            **settings})
        if engine:
            crawler.engine = ExecutionEngine(crawler, lambda _: None)
        pipeline = MongoPipeline.from_crawler(crawler)
        run(loop, pipeline.open_spider(ItemsSpider.from_crawler(crawler)))
        pipelines.append(pipeline)
        return pipeline

    yield make
    for pipeline in pipelines:
        run(loop, pipeline.close_spider(), 60)


@pytest.fixture
def db(mongo_server: Any, prefix: str) -> Iterator[pymongo.database.Database[Any]]:
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(mongo_server.uri,
                                                           serverSelectionTimeoutMS=10_000)
    yield client[prefix]
    client.close()


@pytest.fixture
def own_mongo(tmp_path: Path) -> Iterator[MongoServer]:
    """A MongoDB of this test alone, which it may stop and restart (data on disk)."""
    server = MongoServer(work_dir=tmp_path / "mongo").start()
    try:
        yield server
    finally:
        server.cleanup()


def stat(pipeline: MongoPipeline, name: str) -> Any:
    return pipeline.crawler.stats.get_value(name, 0)


def _env() -> dict[str, str]:
    """The environment of a worker subprocess: this checkout, no project settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("SCRAPY_SETTINGS_MODULE", "MONGO_URI")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def items(n: int, start: int = 0, **extra: Any) -> list[dict[str, Any]]:
    return [{"url": f"https://example.com/{i}", "n": i, **extra} for i in range(start, start + n)]


# --- batching ----------------------------------------------------------------

def test_full_batches_write_at_once_and_close_flushes_the_rest(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, mongo_server: Any,
        prefix: str, db: Any) -> None:
    pipeline = make_pipeline(mongo_server.uri, prefix, MONGO_BATCH_SIZE=10,
                             MONGO_FLUSH_INTERVAL=60)
    deferreds = [pipeline.write(item) for item in items(25)]

    settle(loop, deferreds[:20])
    spin(loop, 0.2)
    assert not any(d.called for d in deferreds[20:]), "a partial batch was written early"
    assert db.items.count_documents({}) == 20
    assert stat(pipeline, "mongo/batches") == 2

    run(loop, pipeline.close_spider())
    assert all(d.called for d in deferreds)
    assert db.items.count_documents({}) == 25
    assert stat(pipeline, "mongo/batches") == math.ceil(25 / 10)
    assert stat(pipeline, "mongo/items_written") == 25
    assert stat(pipeline, "mongo/write_errors") == 0


def test_partial_batch_is_written_after_the_flush_interval(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, mongo_server: Any,
        prefix: str, db: Any) -> None:
    pipeline = make_pipeline(mongo_server.uri, prefix, MONGO_BATCH_SIZE=100,
                             MONGO_FLUSH_INTERVAL=0.4)
    started = time.monotonic()
    deferreds = [pipeline.write(item) for item in items(3)]
    results = settle(loop, deferreds, timeout=10)
    elapsed = time.monotonic() - started

    assert [ok for ok, _ in results] == [True] * 3
    assert 0.35 <= elapsed < 5, elapsed
    assert stat(pipeline, "mongo/batches") == 1
    assert db.items.count_documents({}) == 3


def test_deferred_fires_with_the_item_only_once_it_is_stored(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, mongo_server: Any,
        prefix: str, db: Any) -> None:
    pipeline = make_pipeline(mongo_server.uri, prefix, MONGO_BATCH_SIZE=100,
                             MONGO_FLUSH_INTERVAL=0.3)
    item = {"url": "https://example.com/a", "title": "A"}
    seen_in_db: list[int] = []
    d = pipeline.write(item)
    d.addCallback(lambda result: seen_in_db.append(db.items.count_documents({})) or result)

    assert not d.called
    assert db.items.count_documents({}) == 0
    assert run(loop, d) is item
    assert seen_in_db == [1]


def test_process_item_returns_the_item_after_storing_it(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, mongo_server: Any,
        prefix: str, db: Any) -> None:
    pipeline = make_pipeline(mongo_server.uri, prefix, MONGO_FLUSH_INTERVAL=0.05)
    item = {"url": "https://example.com/p", "title": "P"}
    assert run(loop, pipeline.process_item(item)) is item
    assert db.items.find_one({}, {"_id": 0}) == item


# --- one document per key, and the index ---------------------------------------------------

def test_same_key_gives_one_document_with_the_latest_fields(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, mongo_server: Any,
        prefix: str, db: Any) -> None:
    pipeline = make_pipeline(mongo_server.uri, prefix, MONGO_BATCH_SIZE=3,
                             MONGO_FLUSH_INTERVAL=0.05)
    url = "https://example.com/same"
    # Same batch (collapsed into one upsert), then a later batch.
    first = [pipeline.write({"url": url, "v": 1, "a": "x"}),
             pipeline.write({"url": url, "v": 2, "b": "y"}),
             pipeline.write({"url": "https://example.com/other", "v": 0})]
    assert [ok for ok, _ in settle(loop, first)] == [True] * 3
    assert db.items.find_one({"url": url}, {"_id": 0}) == {"url": url, "v": 2, "a": "x", "b": "y"}

    assert [ok for ok, _ in settle(loop, [pipeline.write({"url": url, "v": 3})])] == [True]
    assert db.items.count_documents({"url": url}) == 1
    assert db.items.find_one({"url": url}, {"_id": 0}) == {"url": url, "v": 3, "a": "x", "b": "y"}
    assert stat(pipeline, "mongo/items_written") == 4
    # The later batch's insert met the stored key and was upserted at once, no back-off.
    assert stat(pipeline, "mongo/duplicate_keys") == 1
    assert stat(pipeline, "mongo/retries") == 0


def test_unique_index_on_the_configured_key_and_collection(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, mongo_server: Any,
        prefix: str, db: Any) -> None:
    make_pipeline(mongo_server.uri, prefix)
    assert any(ix.get("unique") and ix["key"] == [("url", 1)]
               for ix in db.items.index_information().values())

    pipeline = make_pipeline(mongo_server.uri, prefix, MONGO_COLLECTION="products",
                             MONGO_UNIQUE_KEY="sku", MONGO_FLUSH_INTERVAL=0.05)
    assert any(ix.get("unique") and ix["key"] == [("sku", 1)]
               for ix in db.products.index_information().values())
    settle(loop, [pipeline.write({"sku": "A1", "price": 1}), pipeline.write({"sku": "A1", "price": 2})])
    assert list(db.products.find({}, {"_id": 0})) == [{"sku": "A1", "price": 2}]


def test_items_that_cannot_be_stored_are_dropped_and_the_rest_written(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, mongo_server: Any,
        prefix: str, db: Any) -> None:
    pipeline = make_pipeline(mongo_server.uri, prefix, MONGO_FLUSH_INTERVAL=0.05)
    results = settle(loop, [
        pipeline.write({"title": "no url"}),
        pipeline.write({"url": "", "title": "empty url"}),
        pipeline.write({"url": "https://example.com/set", "tags": {1, 2}}),  # not BSON
        pipeline.write({"url": "https://example.com/ok"}),
    ])
    assert [ok for ok, _ in results] == [False, False, False, True]
    for _, failure in results[:3]:
        assert failure.check(DropItem) and not failure.check(ItemNotStored)
    assert "no 'url' field (MONGO_UNIQUE_KEY)" in str(results[0][1].value)
    assert "BSON" in str(results[2][1].value)
    assert stat(pipeline, "mongo/items_rejected") == 3
    assert [d["url"] for d in db.items.find()] == ["https://example.com/ok"]


def test_items_mongodb_refuses_are_dropped_without_holding_up_their_batch(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, mongo_server: Any,
        prefix: str, db: Any) -> None:
    pipeline = make_pipeline(mongo_server.uri, prefix, MONGO_BATCH_SIZE=4,
                             MONGO_FLUSH_INTERVAL=0.05)
    taken_id = db.items.insert_one({"url": "https://example.com/taken"}).inserted_id
    db.items.insert_one({"url": "https://example.com/empty-name"})  # so it is upserted
    results = settle(loop, [
        pipeline.write({"url": "https://example.com/1"}),
        pipeline.write({"url": "https://example.com/empty-name", "": 1}),  # $set refuses ""
        pipeline.write({"url": "https://example.com/dup-id", "_id": taken_id}),  # never fits
        pipeline.write({"url": "https://example.com/2"}),
    ], timeout=20)
    assert [ok for ok, _ in results] == [True, False, False, True]
    assert "refused" in str(results[1][1].value) and results[1][1].value.log_level == "ERROR"
    assert "11000" in str(results[2][1].value)
    assert stat(pipeline, "mongo/items_rejected") == 2
    assert stat(pipeline, "mongo/items_written") == 2
    assert db.items.count_documents({}) == 4
    assert db.items.find_one({"url": "https://example.com/empty-name"}, {"_id": 0}) == {
        "url": "https://example.com/empty-name"}


# --- start-up ------------------------------------------------------------------

def test_start_up_fails_fast_with_the_password_masked(
        loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture) -> None:
    uri = f"mongodb://app:s3cr3t-pw@127.0.0.1:{free_port()}/?authSource=admin"
    crawler = get_crawler(ItemsSpider, {"MONGO_URI": uri, "MONGO_CONNECT_TIMEOUT": 1.0})
    pipeline = MongoPipeline.from_crawler(crawler)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger=LOGGER), pytest.raises(MongoStartupError) as info:
        run(loop, pipeline.open_spider(ItemsSpider.from_crawler(crawler)))
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert "mongodb://app:***@127.0.0.1" in message and "s3cr3t-pw" not in message
    assert "s3cr3t-pw" not in caplog.text and "mongodb://app:***@" in caplog.text
    assert pipeline._pool is None  # its thread is stopped
    run(loop, pipeline.close_spider())  # Scrapy still closes it: a no-op


def test_scrapy_exits_non_zero_at_once_when_mongodb_is_down(tmp_path: Path) -> None:
    (tmp_path / "spider.py").write_text(
        "import scrapy\n\n\n"
        "class OneItem(scrapy.Spider):\n"
        "    name = 'one'\n\n"
        "    async def start(self):\n"
        "        yield {'url': 'https://example.com/'}\n")
    uri = f"mongodb://app:s3cr3t-pw@127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "scrapy", "runspider", "spider.py", "-s", "LOG_LEVEL=INFO",
           "-s", 'ITEM_PIPELINES={"distscraper.pipelines.mongo.MongoPipeline": 300}',
           "-s", f"MONGO_URI={uri}", "-s", "MONGO_CONNECT_TIMEOUT=1"]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    assert elapsed < 20, log
    assert "s3cr3t-pw" not in log
    assert any("[distscraper.pipelines.mongo] ERROR: MongoDB at mongodb://app:***@127.0.0.1" in line
               and "the crawl does not start" in line for line in log.splitlines()), log


# --- outages -------------------------------------------------------------------

def test_outage_keeps_items_pauses_crawling_and_writes_each_once_after_restart(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, own_mongo: MongoServer,
        caplog: pytest.LogCaptureFixture) -> None:
    pipeline = make_pipeline(own_mongo.uri, "outage", engine=True, MONGO_BATCH_SIZE=5,
                             MONGO_FLUSH_INTERVAL=0.05, MONGO_BUFFER_MAX=10,
                             MONGO_CONNECT_TIMEOUT=0.5)
    engine = pipeline.crawler.engine
    assert settle(loop, [pipeline.write(item) for item in items(5)])[0][0]

    own_mongo.stop()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        deferreds = [pipeline.write(item) for item in items(12, start=5)]
        assert engine.paused, "crawling should pause at MONGO_BUFFER_MAX unwritten items"
        spin(loop, 2.0)
        assert not any(d.called for d in deferreds)
        assert stat(pipeline, "mongo/retries") >= 2
        assert stat(pipeline, "mongo/write_errors") >= 2
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                    and "unreachable" in r.getMessage()]
        assert len(warnings) == 1 and "12 unwritten items" in warnings[0].getMessage()

        own_mongo.start()
        results = settle(loop, deferreds, timeout=60)
    assert [ok for ok, _ in results] == [True] * 12
    assert not engine.paused, "crawling should resume once the buffer drained"
    assert any("accepts writes again" in r.getMessage() for r in caplog.records
               if r.levelno == logging.INFO)
    assert stat(pipeline, "mongo/items_written") == 17
    assert stat(pipeline, "mongo/buffer_max") == 12

    client: pymongo.MongoClient[Any] = pymongo.MongoClient(own_mongo.uri)
    try:
        docs = list(client.outage.items.find({}, {"_id": 0, "url": 1}))
    finally:
        client.close()
    urls = [d["url"] for d in docs]
    assert len(urls) == 17 and set(urls) == {i["url"] for i in items(17)}


def test_close_gives_up_after_the_close_timeout_while_mongodb_is_down(
        loop: asyncio.AbstractEventLoop, make_pipeline: PipelineFactory, own_mongo: MongoServer,
        caplog: pytest.LogCaptureFixture) -> None:
    pipeline = make_pipeline(own_mongo.uri, "closing", MONGO_FLUSH_INTERVAL=60,
                             MONGO_CONNECT_TIMEOUT=0.5, MONGO_CLOSE_TIMEOUT=1.5)
    own_mongo.stop()
    deferreds = [pipeline.write(item) for item in items(3)]
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        run(loop, pipeline.close_spider(), 30)
    elapsed = time.monotonic() - started
    assert 1.4 <= elapsed < 6, elapsed
    results = settle(loop, deferreds)
    assert all(not ok and failure.check(ItemNotStored) for ok, failure in results)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("3 items were not stored" in m and "crawled again" in m for m in errors), errors
    assert stat(pipeline, "mongo/items_unwritten") == 3


def test_a_stopping_crawl_gives_up_on_items_while_mongodb_is_down(
        tmp_path: Path, own_mongo: MongoServer) -> None:
    """Scrapy waits for item processing before closing pipelines: a SIGTERMed worker
    must still exit, after MONGO_CLOSE_TIMEOUT, without storing the items."""
    (tmp_path / "spider.py").write_text(
        "import asyncio\nimport os\n\nimport scrapy\n\n\n"
        "class Slow(scrapy.Spider):\n"
        "    name = 'slow'\n\n"
        "    async def start(self):\n"
        "        yield scrapy.Request('data:,first', callback=self.parse_first)\n\n"
        "    def parse_first(self, response):\n"
        "        yield {'url': 'https://example.com/first'}\n"
        "        yield scrapy.Request('data:,more', callback=self.parse_more)\n\n"
        "    async def parse_more(self, response):\n"
        "        while not os.path.exists('mongo-down'):\n"
        "            await asyncio.sleep(0.05)\n"
        "        for i in range(3):\n"
        "            yield {'url': f'https://example.com/{i}'}\n")
    cmd = [sys.executable, "-m", "scrapy", "runspider", "spider.py", "-s", "LOG_LEVEL=INFO",
           "-s", 'ITEM_PIPELINES={"distscraper.pipelines.mongo.MongoPipeline": 300}',
           "-s", f"MONGO_URI={own_mongo.uri}", "-s", "MONGO_DATABASE=stopping",
           "-s", "MONGO_FLUSH_INTERVAL=0.05", "-s", "MONGO_CONNECT_TIMEOUT=0.5",
           "-s", "MONGO_RETRY_MAX=0.5", "-s", "MONGO_CLOSE_TIMEOUT=2",
           "-s", "TELNETCONSOLE_ENABLED=False"]
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=_env())
    try:
        deadline = time.monotonic() + 30
        # (closed before the server stops: a client closing on a dead server waits ~30 s)
        with pymongo.MongoClient(own_mongo.uri) as client:
            while client.stopping.slow.count_documents({}) < 1:
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
        own_mongo.stop()
        (tmp_path / "mongo-down").touch()
        while "is unreachable" not in log_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        proc.terminate()
        started = time.monotonic()
        proc.wait(timeout=20)
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = log_path.read_text()
    assert "3 items were not stored" in log, log
