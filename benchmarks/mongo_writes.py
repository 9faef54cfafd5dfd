"""MongoDB writes: the pipeline's batched upserts against one write per item.

* ``pipeline``: the real :class:`distscraper.pipelines.mongo.MongoPipeline`,
  driven by a real Scrapy crawler in a child process: ``PARTS`` ``data:`` URL
  responses (no HTTP) whose callbacks yield N page items between them, as a
  crawl's many pages do, with Scrapy's defaults (16 concurrent requests,
  ``CONCURRENT_ITEMS`` 100 per response) and the pipeline's (batches of 100,
  one document per ``url``). Items/s from the first item yielded to the last
  item acknowledged (``item_scraped`` fires only once MongoDB has stored it);
* ``pipeline_component``: the same pipeline alone (no Scrapy engine, so no
  Scrapy per-item cost): items handed to ``process_item`` with up to
  ``WINDOW`` of them unacknowledged at a time (16 concurrent responses times
  ``CONCURRENT_ITEMS``), which is as many as a crawler lets it hold;
* ``insert_one`` and ``update_one_upsert``: pymongo, one call per item, on a
  collection with the same unique index.

Every method writes the same documents to a fresh database.
``python -m benchmarks.mongo_writes`` runs one quick round on an embedded server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any, Iterator

import pymongo

from benchmarks.workers import REPO_ROOT

#: Responses the pipeline's items come from (a crawl's items come from many pages).
PARTS = 100
#: Items the component benchmark keeps unacknowledged: 16 responses x CONCURRENT_ITEMS.
WINDOW = 1600


def page_doc(i: int) -> dict[str, Any]:
    """A document shaped like a stored PageItem (about 600 bytes of BSON)."""
    return {
        "url": f"http://127.0.0.1:8080/item/{i}", "requested_url": f"http://127.0.0.1:8080/item/{i}",
        "status": 200, "content_type": "text/html; charset=utf-8",
        "title": f"Lively Cedar #{i} - Category {i % 20 + 1}",
        "description": "Amber anchor apex arbor atlas beacon birch breeze canyon cedar cinder citrus.",
        "canonical": f"http://127.0.0.1:8080/item/{i}",
        "headings": [f"Lively Cedar #{i}", "Description", "Details", "Related items"],
        "text_length": 1200 + i % 500, "out_links": 6, "content_hash": f"{i:040x}",
        "depth": 3, "referer": "http://127.0.0.1:8080/cat/1/", "fetched_at": 1.7e9 + i,
        "download_latency": 0.0021, "node": "bench-1",
    }


def direct(uri: str, database: str, n: int, how: str) -> float:
    """Items/s writing *n* documents one call at a time (``insert_one`` or ``update_one_upsert``)."""
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(uri)
    try:
        coll = client[database]["site"]
        coll.create_index("url", unique=True)
        docs = [page_doc(i) for i in range(n)]
        t0 = time.perf_counter()
        for doc in docs:
            if how == "insert_one":
                coll.insert_one(doc)
            else:
                coll.update_one({"url": doc["url"]}, {"$set": doc}, upsert=True)
        elapsed = time.perf_counter() - t0
        assert coll.count_documents({}) == n
        return n / elapsed
    finally:
        client.drop_database(database)
        client.close()


def pipeline(uri: str, database: str, n: int, mode: str = "--crawler") -> float:
    """Items/s of the real pipeline (child process), in a Scrapy crawler or fed directly."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.mongo_writes", mode, uri, database, str(n)],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"pipeline child failed: {out.stderr[-2000:]}")
    result = json.loads(lines[-1])
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(uri)
    try:
        stored = client[database]["site"].count_documents({})
        client.drop_database(database)
    finally:
        client.close()
    if stored != n or result["scraped"] != n:
        raise RuntimeError(f"pipeline stored {stored} of {n} items ({result})")
    return float(result["items_per_s"])


def _crawler(uri: str, database: str, n: int) -> None:
    import scrapy
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    marks: dict[str, Any] = {"scraped": 0}

    class ItemSpider(scrapy.Spider):
        name = "site"
        start_urls = [f"data:,{part}" for part in range(PARTS)]

        def parse(self, response: Any, **_: Any) -> Iterator[dict[str, Any]]:
            marks.setdefault("t0", time.perf_counter())
            for i in range(int(response.text), n, PARTS):
                yield page_doc(i)

    def scraped(item: Any, **_: Any) -> None:
        marks["scraped"] += 1
        marks["t1"] = time.perf_counter()

    process = CrawlerProcess(settings={
        "ITEM_PIPELINES": {"distscraper.pipelines.mongo.MongoPipeline": 300},
        "MONGO_URI": uri, "MONGO_DATABASE": database, "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    })
    crawler = process.create_crawler(ItemSpider)
    crawler.signals.connect(scraped, signal=signals.item_scraped)
    process.crawl(crawler)
    process.start()
    span = marks.get("t1", 0) - marks.get("t0", 0)
    print(json.dumps({"scraped": marks["scraped"], "seconds": span,
                      "items_per_s": marks["scraped"] / span if span > 0 else 0}), flush=True)


def _component(uri: str, database: str, n: int) -> None:
    import asyncio

    from scrapy import Spider
    from scrapy.utils.reactor import install_reactor
    from scrapy.utils.test import get_crawler

    from distscraper.pipelines.mongo import MongoPipeline

    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
    from twisted.internet import reactor

    loop: asyncio.AbstractEventLoop = reactor._asyncioEventloop  # type: ignore[attr-defined]
    asyncio.set_event_loop(loop)
    crawler = get_crawler(Spider, {"MONGO_URI": uri, "MONGO_DATABASE": database,
                                   "LOG_LEVEL": "WARNING"})
    pipe = MongoPipeline.from_crawler(crawler)

    async def feed() -> float:
        await pipe.open_spider(Spider("site"))
        window = asyncio.Semaphore(WINDOW)

        async def one(i: int) -> None:
            await pipe.process_item(page_doc(i))
            window.release()

        tasks = []
        t0 = time.perf_counter()
        for i in range(n):
            await window.acquire()
            tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.gather(*tasks)
        span = time.perf_counter() - t0
        await pipe.close_spider()
        return span

    span = loop.run_until_complete(feed())
    print(json.dumps({"scraped": n, "seconds": span, "items_per_s": n / span}), flush=True)


def run(uri: str, *, items: int = 10_000, single_items: int = 2_000, runs: int = 3,
        server_pid: int | None = None) -> dict[str, dict[str, list[float]]]:
    """Items/s of each method, *runs* times each, interleaved; with *server_pid*, also the
    MongoDB server's CPU ms per item (the server, not the client, can be what limits)."""
    methods = {
        "pipeline_component": lambda r: (items, pipeline(uri, f"bench_mw_c{r}", items, "--component")),
        "pipeline": lambda r: (items, pipeline(uri, f"bench_mw_p{r}", items)),
        "insert_one": lambda r: (single_items, direct(uri, f"bench_mw_i{r}", single_items, "insert_one")),
        "update_one_upsert": lambda r: (single_items, direct(uri, f"bench_mw_u{r}", single_items, "update_one")),
    }
    out: dict[str, dict[str, list[float]]] = {m: {"items_per_s": [], "server_cpu_ms_per_item": []}
                                              for m in methods}
    for r in range(runs):
        for name, method in methods.items():
            cpu0 = _cpu(server_pid)
            n, rate = method(r)
            out[name]["items_per_s"].append(round(rate))
            if server_pid:
                out[name]["server_cpu_ms_per_item"].append(round(1000 * (_cpu(server_pid) - cpu0) / n, 3))
    return out


def _cpu(pid: int | None) -> float:
    if not pid:
        return 0.0
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] in ("--crawler", "--component"):
        child = _crawler if sys.argv[1] == "--crawler" else _component
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    from distscraper.sandbox.servers import MongoServer

    with MongoServer(storage=":memory:") as server:
        print(run(server.uri, items=3000, single_items=1000, runs=1, server_pid=server.pid))


if __name__ == "__main__":
    main()
