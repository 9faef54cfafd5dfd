"""Priority and fairness of the shared frontier.

* Store level (real Redis, no HTTP): a request's priority survives Redis; higher
  priority bands go first, FIFO within a band; domains take turns within a band, so a
  domain with thousands of queued URLs cannot starve one with a few.
* Cluster level (a real worker): seeds with a JSON priority and URLs matched by
  FRONTIER_PRIORITY_RULES are fetched in priority order, FIFO within a priority.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

import pytest
from cluster import Cluster
from scrapy import Request, Spider

from distscraper.frontier import codec
from distscraper.frontier.dupefilter import RedisDupeFilter
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.store import ExchangeParams, FrontierStore, Outbox

PARAMS = ExchangeParams(node="test", lease_ms=60_000)  # no delay, no concurrency cap
SPIDER = Spider(name="site")


@pytest.fixture
def store(redis_client, prefix) -> FrontierStore:
    keys = FrontierKeys(prefix)
    return FrontierStore(redis_client, keys, RedisDupeFilter(redis_client, keys.dupefilter).lua_prelude())


def push(store: FrontierStore, requests: Iterable[Request], batch: int = 500) -> None:
    """Queue *requests* through the exchange script, as workers do."""
    box = Outbox()
    for request in requests:
        fp = os.urandom(16)
        box.pushes.append((fp, codec.domain_of(request), FrontierStore.queue_score(request.priority),
                           codec.encode(request, None, fp), False))
        if len(box.pushes) >= batch:
            assert store.exchange(box, PARAMS).new == len(box.pushes)
            box = Outbox()
    if box.pushes:
        assert store.exchange(box, PARAMS).new == len(box.pushes)


def pop_urls(store: FrontierStore, n: int, batch: int = 1) -> list[str]:
    """Lease up to *n* requests, *batch* per round trip; their URLs in lease order."""
    out: list[str] = []
    while len(out) < n:
        popped = store.exchange(Outbox(), PARAMS, pop=min(batch, n - len(out))).popped
        if not popped:
            break
        out += [codec.loads(payload)["u"] for payload, _token, _domain in popped]
    return out


def test_priority_survives_redis(store):
    request = Request("http://a.test/x", priority=7, meta={"k": "v"})
    push(store, [request])
    [(payload, _token, _domain)] = store.exchange(Outbox(), PARAMS, pop=1).popped
    back = codec.decode(payload, SPIDER)
    assert (back.url, back.priority, back.meta) == (request.url, 7, {"k": "v"})


def test_bands_first_then_fifo_within_a_band(store):
    spec = [("a", 0), ("b", 0), ("x", -1), ("y", 3), ("c", 0), ("z", 3), ("w", -1)]
    push(store, [Request(f"http://a.test/{name}", priority=p) for name, p in spec])
    order = [url.rsplit("/", 1)[1] for url in pop_urls(store, 10)]
    assert order == ["y", "z", "a", "b", "c", "x", "w"]


def test_a_higher_band_on_any_domain_goes_first(store):
    push(store, [Request(f"http://low.test/{i}") for i in range(5)])
    push(store, [Request(f"http://high.test/{i}", priority=5) for i in range(5)])
    order = [url.split("/")[2] for url in pop_urls(store, 10, batch=3)]
    assert order == ["high.test"] * 5 + ["low.test"] * 5


@pytest.mark.parametrize("batch", [1, 8])
def test_a_big_domain_does_not_starve_a_small_one(store, batch):
    push(store, [Request(f"http://big.test/{i}") for i in range(2000)])
    push(store, [Request(f"http://small.test/{i}") for i in range(20)])
    first = pop_urls(store, 60, batch)
    small = [url for url in first if "//small.test/" in url]
    assert small == [f"http://small.test/{i}" for i in range(20)]  # all of them, FIFO
    # A domain that arrives while another is being drained gets its turn at once too.
    push(store, [Request(f"http://late.test/{i}") for i in range(10)])
    nxt = pop_urls(store, 24, batch)
    assert sum("//late.test/" in url for url in nxt) == 10
    big = [url for url in first + nxt if "//big.test/" in url]
    assert big == [f"http://big.test/{i}" for i in range(len(big))]  # FIFO within the big one


def test_worker_fetches_by_priority_then_fifo(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=40, categories=4)
    plain_items = [f"/item/{i}" for i in range(1, 16)]  # priority 0
    categories = [f"/cat/{c}/" for c in range(1, 5)]  # priority 5 from FRONTIER_PRIORITY_RULES
    urgent = [f"/item/{i}" for i in range(21, 29)]  # priority 9 in the JSON seed
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path,
                      SITE_FOLLOW_LINKS=False, CONCURRENT_REQUESTS=1, FRONTIER_POP_BATCH=1,
                      FRONTIER_SEED_BATCH=100, FRONTIER_PRIORITY_RULES=[["/cat/", 5]])
    # Queued lowest priority first; one read of start_urls takes them all.
    cluster.seed(*[web.url(p) for p in plain_items + categories],
                 *[json.dumps({"url": web.url(p), "priority": 9}) for p in urgent])
    cluster.start(1)
    assert cluster.wait_done(120) == [0]

    order = [h["path"] for h in web.hits() if h["path"] != "/robots.txt"]
    assert order == urgent + categories + plain_items
