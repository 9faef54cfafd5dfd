"""Leases at the store level (real Redis, no HTTP): pop leases, ack removes, renew extends,
expired leases come back exactly once however many nodes reap at the same time, and a
request that was seen but not finished is always recovered."""

from __future__ import annotations

import os
import threading
import time

import pytest
import redis
from scrapy import Request

from distscraper.frontier import codec
from distscraper.frontier.dupefilter import RedisDupeFilter
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.store import ExchangeParams, FrontierStore, Outbox

LONG = ExchangeParams(node="a", lease_ms=60_000)
SHORT = ExchangeParams(node="a", lease_ms=300)


@pytest.fixture
def keys(prefix) -> FrontierKeys:
    return FrontierKeys(prefix)


def make_store(redis_client, keys) -> FrontierStore:
    return FrontierStore(redis_client, keys, RedisDupeFilter(redis_client, keys.dupefilter).lua_prelude())


def push(store: FrontierStore, *urls: str) -> None:
    box = Outbox()
    for url in urls:
        fp = os.urandom(16)
        request = Request(url)
        box.pushes.append((fp, codec.domain_of(request), 0, codec.encode(request, None, fp), False))
    assert store.exchange(box, LONG).new == len(urls)


def test_pop_leases_and_ack_removes(redis_client, keys):
    store = make_store(redis_client, keys)
    push(store, "http://a.test/1")
    [(payload, _token, domain)] = store.exchange(Outbox(), LONG, pop=5).popped
    assert redis_client.zscore(keys.inflight, payload) is not None
    assert redis_client.zcard(keys.queue(domain)) == 0
    result = store.exchange(Outbox(acks=[(payload, domain)]), LONG)
    assert redis_client.zcard(keys.inflight) == 0 and result.work == 0


def test_renew_extends_only_live_leases(redis_client, keys):
    store = make_store(redis_client, keys)
    push(store, "http://a.test/1")
    [(payload, _token, domain)] = store.exchange(Outbox(), SHORT, pop=1).popped
    before = redis_client.zscore(keys.inflight, payload)
    assert store.renew([payload], 60_000) == 1
    assert redis_client.zscore(keys.inflight, payload) > before + 50_000
    store.exchange(Outbox(acks=[(payload, domain)]), LONG)
    assert store.renew([payload], 60_000) == 0  # an ended lease is not brought back
    assert redis_client.zcard(keys.inflight) == 0


def test_expired_leases_come_back_once_with_racing_reapers(redis_server, redis_client, keys):
    store = make_store(redis_client, keys)
    urls = [f"http://a.test/{i}" for i in range(50)]
    push(store, *urls)
    popped = store.exchange(Outbox(), SHORT, pop=50).popped
    assert len(popped) == 50
    # The worker "dies": its leases are never acked. Seen is not done: the
    # dupefilter has every URL, yet all of them must be recovered.
    time.sleep(0.5)
    reapers = [make_store(redis.Redis.from_url(redis_server.url), keys) for _ in range(4)]
    reaped: list[int] = []
    threads = [threading.Thread(target=lambda s=s: reaped.append(s.exchange(Outbox(), LONG).reaped))
               for s in reapers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(reaped) == 50
    assert redis_client.zcard(keys.inflight) == 0
    again = store.exchange(Outbox(), LONG, pop=100).popped
    assert sorted(codec.loads(p)["u"] for p, _, _ in again) == sorted(urls)
    push_again = Outbox()
    fp_seen = codec.loads(again[0][0])["f"]
    push_again.pushes.append((bytes.fromhex(fp_seen), "a.test", 0, again[0][0], False))
    assert store.exchange(push_again, LONG).duplicates == 1  # still seen: no second copy


def test_returned_lease_goes_to_the_front(redis_client, keys):
    store = make_store(redis_client, keys)
    push(store, "http://a.test/1", "http://a.test/2", "http://a.test/3")
    [(first, _t, _d)] = store.exchange(Outbox(), LONG, pop=1).popped
    store.exchange(Outbox(returns=[first]), LONG)
    [(again, _t, _d)] = store.exchange(Outbox(), LONG, pop=1).popped
    assert again == first


def test_an_expired_lease_frees_its_domain_slot_at_once(redis_client, keys):
    store = make_store(redis_client, keys)
    push(store, "http://a.test/1", "http://a.test/2")
    capped = ExchangeParams(node="a", lease_ms=300, concurrency=1, slot_ttl_ms=60_000)
    [(payload, holder, domain)] = store.exchange(Outbox(), capped, pop=5).popped
    assert holder == payload and redis_client.zcard(keys.key(f"slots:{domain}")) == 1
    assert store.exchange(Outbox(), capped, pop=5).popped == []  # the one slot is taken
    time.sleep(0.5)  # the worker died: its lease expires, long before the slot's own expiry
    popped = store.exchange(Outbox(), capped, pop=5).popped
    assert len(popped) == 1  # reaped, slot freed, leased again at once


def test_a_worker_takes_only_its_share_of_a_domains_slots(redis_client, keys):
    store = make_store(redis_client, keys)
    push(store, *(f"http://a.test/{i}" for i in range(10)))
    redis_client.zadd(keys.nodes, {"a": 1, "b": 1})  # two live workers: 4 slots / 2 = 2 each
    capped = ExchangeParams(node="a", lease_ms=60_000, concurrency=4)
    assert len(store.exchange(Outbox(), capped, pop=8, slots_held={"a.test": 1}).popped) == 1
    assert store.exchange(Outbox(), capped, pop=8, slots_held={"a.test": 2}).popped == []
    # The domain was put back, not parked: the other worker takes the rest of the slots.
    other = ExchangeParams(node="b", lease_ms=60_000, concurrency=4)
    assert len(store.exchange(Outbox(), other, pop=8).popped) == 2
