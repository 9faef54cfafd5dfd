"""Unit tests of pure logic: seeds, links, priorities, codec, masking, back-off, settings, lease bookkeeping."""

from __future__ import annotations

import random
import time

import pytest
from scrapy import Request, Spider
from scrapy.settings import Settings

from distscraper import defaults
from distscraper.frontier import codec
from distscraper.frontier.priority import PriorityRules
from distscraper.frontier.retry import backoff_delay, retry_after_seconds
from distscraper.frontier.seeds import SeedError, parse_seed
from distscraper.masking import mask_url
from distscraper.spiders.links import LinkPolicy


class S(Spider):
    name = "s"

    def parse(self, response):  # pragma: no cover
        pass

    def on_error(self, failure):  # pragma: no cover
        pass


@pytest.mark.parametrize("raw,reason", [
    (b"not a url", "white space"),
    (b"example.com/page", "no scheme"),
    (b"file:///etc/passwd", "scheme 'file'"),
    (b"javascript:alert(1)", "scheme 'javascript'"),
    (b"ftp://host/x", "scheme 'ftp'"),
    (b"data:text/html,hi", "scheme 'data'"),
    (b"{bad json", "malformed JSON"),
    (b'{"meta": {}}', "no 'url'"),
    (b'{"url": "http://a/", "priority": "high"}', "'priority' must be an integer"),
    (b'{"url": "http://a/", "priority": true}', "'priority' must be an integer"),
    (b'{"url": "http://a/", "meta": [1]}', "'meta' must be an object"),
    (b'{"url": "http://a/"}' + b" " * 9000, "over SEED_MAX_BYTES"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_bad_seeds_are_rejected_with_a_reason(raw, reason):
    with pytest.raises(SeedError, match=reason):
        parse_seed(raw, max_bytes=8192)


def test_good_seeds():
    assert parse_seed(b"  https://example.com/a  ").url == "https://example.com/a"
    seed = parse_seed(b'{"url": "http://a.org/x", "priority": 9, "meta": {"k": 1}, "force": true}')
    assert (seed.url, seed.priority, seed.meta, seed.force) == ("http://a.org/x", 9, {"k": 1}, True)


def test_link_policy_domains_allow_deny():
    policy = LinkPolicy.from_lists([r"/item/", r"/cat/"], [r"/cat/9"], ["partner.org"])
    assert policy.follows("http://shop.com/item/1", "shop.com")
    assert policy.follows("http://www.shop.com/cat/1", "shop.com")  # subdomain
    assert policy.follows("http://partner.org/item/2", "shop.com")  # extra domain
    assert not policy.follows("http://other.com/item/1", "shop.com")
    assert not policy.follows("http://shop.com/about", "shop.com")  # not allowed
    assert not policy.follows("http://shop.com/cat/9/", "shop.com")  # denied
    assert policy.normalize("http://shop.com/a#frag") == "http://shop.com/a"
    assert policy.normalize("mailto:x@y") is None


def test_bad_regex_names_the_setting():
    with pytest.raises(ValueError, match="SITE_DENY"):
        LinkPolicy.from_lists([], ["("], [])


def test_priority_rules():
    rules = PriorityRules.from_setting('[["/cat/", 5], ["/item/", -1]]')
    assert rules.priority_for("http://a/cat/1") == 5
    assert rules.priority_for("http://a/item/1") == -1
    assert rules.priority_for("http://a/") == 0
    with pytest.raises(ValueError, match="FRONTIER_PRIORITY_RULES"):
        PriorityRules.from_setting([["/x/"]])


def test_codec_round_trip_keeps_everything_but_local_meta():
    spider = S()
    request = Request("http://a.com/x?q=1", callback=spider.parse, errback=spider.on_error,
                      method="POST", body=b"\x00\xffbin", headers={"X-A": "1"},
                      cookies={"c": "v"}, meta={"depth": 2, "_ds_lease": 7, "k": [1, 2]},
                      priority=4, dont_filter=True, cb_kwargs={"n": 1})
    payload = codec.encode(request, spider, b"\x01" * 16)
    assert b"_ds_lease" not in payload
    back = codec.decode(payload, spider)
    assert (back.url, back.method, back.body, back.priority, back.dont_filter) == (
        request.url, "POST", b"\x00\xffbin", 4, True)
    assert back.callback == spider.parse and back.errback == spider.on_error
    assert back.meta == {"depth": 2, "k": [1, 2]} and back.cb_kwargs == {"n": 1}
    assert back.headers.get("X-A") == b"1"
    assert codec.loads(payload)["d"] == "a.com"


@pytest.mark.parametrize("payload,reason", [
    (b"garbage", "not JSON"),
    (b'{"x": 1}', "not a request payload"),
    (b'{"u": "http://a/", "d": "a", "cb": "nope"}', "no such method"),
    (b'{"u": "http://a/", "d": "a", "cls": "os.system"}', "not a scrapy.Request subclass"),
])
def test_codec_rejects_poison(payload, reason):
    with pytest.raises(codec.PayloadError, match=reason):
        codec.decode(payload, S())


def test_unserializable_meta_is_an_error():
    with pytest.raises(codec.PayloadError, match="meta"):
        codec.encode(Request("http://a/", meta={"x": object()}), None, b"\0" * 16)


def test_mask_url():
    assert mask_url("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert mask_url("mongodb://u:p%40ss@h1,h2/db") == "mongodb://u:***@h1,h2/db"
    assert mask_url("redis://h:6379") == "redis://h:6379"


def test_backoff_grows_and_is_capped():
    rng = random.Random(1)
    delays = [backoff_delay(n, 1.0, 10.0, 0.0, rng) for n in range(1, 7)]
    assert delays == [1, 2, 4, 8, 10, 10]
    jittered = backoff_delay(3, 1.0, 60.0, 0.25, rng)
    assert 3.0 <= jittered <= 5.0


def test_retry_after():
    assert retry_after_seconds(b"7") == 7
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480 - 10) == 10
    assert retry_after_seconds(b"soon") is None


def test_settings_errors_name_the_setting_and_value():
    with pytest.raises(ValueError, match=r"FRONTIER_POP_BATCH=0"):
        defaults.get(Settings({"FRONTIER_POP_BATCH": 0}), "FRONTIER_POP_BATCH")
    with pytest.raises(ValueError, match=r"MONGO_BATCH_SIZE='many'"):
        defaults.get(Settings({"MONGO_BATCH_SIZE": "many"}), "MONGO_BATCH_SIZE")
    assert defaults.get(Settings({"SITE_DENY": '["a,b", "c"]'}), "SITE_DENY") == ["a,b", "c"]
    assert defaults.get(Settings({}), "MONGO_DATABASE") == "distscraper"


def test_lease_book_counts_slots_held_and_pages_being_stored():
    from distscraper.frontier.leases import LeaseBook
    from distscraper.frontier.store import Outbox

    book = LeaseBook(Outbox())
    a, b, c = (Request(f"http://a.test/{i}") for i in range(3))
    book.add(a, b"pa", "a.test", b"pa")
    book.add(b, b"pb", "a.test", b"pb")
    book.add(c, b"pc", "c.test", b"")  # no per-domain limit: holds no slot
    assert book.slots_held == {"a.test": 2}
    book.release_slot(a)  # left the downloader
    book.item_started(a)
    book.outputs_done(a)  # parsed; its item is being stored
    assert book.slots_held == {"a.test": 1} and book.storing == 1
    book.item_finished(a)  # stored: acked
    assert book.storing == 0 and book.outbox.acks == [(b"pa", "a.test")]
    book.outputs_done(c)  # no items: acked at once
    assert book.storing == 0 and len(book) == 1
    assert list(book.forget_stale(time.monotonic() + 1)) and book.slots_held == {}
