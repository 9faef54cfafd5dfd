"""Bad input never stops the crawl: bad seeds, poison queue entries, bad pages.

Every bad seed lands in ``<prefix>:start_urls:invalid`` with its reason, every
undecodable queue entry in ``<prefix>:quarantine``, every bad page is counted
in the worker's final stats, and the good work around them completes.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from cluster import Cluster
from helpers import fetch_counts

from distscraper.sandbox.site import EXTRA_LINKS


def worker_logs(tmp_path: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("worker-*.log")))


def final_stats(log: str) -> dict[str, Any]:
    """The stats a worker dumps when it closes (one worker per test here)."""
    match = re.search(r"Dumping Scrapy stats:\n(\{.*?\})\n\S", log, re.S)
    assert match, "no stats dump in the worker log"
    text = re.sub(r"datetime\.datetime\([^)]*\)", "None", match.group(1))
    return ast.literal_eval(text)


def assert_no_crash(log: str) -> None:
    assert "Spider error" not in log, "the spider raised"
    assert "Traceback" not in log, "something raised"
    assert "Unhandled" not in log


# --- seeds ----------------------------------------------------------------------


def test_bad_seeds_are_set_aside_with_a_reason(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=40, categories=2)
    good = [web.url(f"/item/{i}") for i in range(1, 21)]
    other = web.url("/item/30")  # only ever seeded badly: must not be fetched
    oversize = json.dumps({"url": other, "meta": {"note": "x" * 600}})
    # seed -> words its rejection reason must contain
    bad: dict[str, str] = {
        "just some words": "not a URL",
        "example.com/no-scheme": "no scheme",
        "file:///etc/passwd": "'file' is not http or https",
        "javascript:alert(1)": "'javascript' is not http or https",
        "ftp://127.0.0.1/pub/file.txt": "'ftp' is not http or https",
        "data:text/html,<h1>hi</h1>": "'data' is not http or https",
        "http:///no-host": "no host",
        '{"url": "%s", "priority": ' % other: "malformed JSON",
        '{"priority": 5, "meta": {}}': "has no 'url'",
        '{"url": 42}': "'url' must be a string",
        '{"url": "%s", "priority": "high"}' % other: "'priority' must be an integer, not str",
        '{"url": "%s", "meta": ["a", "b"]}' % other: "'meta' must be an object, not list",
        '{"url": "%s", "force": "yes"}' % other: "'force' must be true or false",
        '["%s"]' % other: "not a URL",
        oversize: f"seed is {len(oversize)} bytes, over SEED_MAX_BYTES=512",
    }
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path,
                      SITE_FOLLOW_LINKS=False, SEED_MAX_BYTES=512)
    mixed = [s for pair in zip(good, bad) for s in pair] + good[len(bad):]
    cluster.seed(*mixed)
    cluster.redis.lpush(cluster.keys.start_urls, b"\xff\xfe not utf-8")
    cluster.start(1)
    assert cluster.wait_done(120) == [0]

    assert set(cluster.stored()) == set(good)
    assert fetch_counts(web.hits())["/item/30"] == 0
    rejected = [json.loads(r) for r in cluster.redis.lrange(cluster.keys.seeds_invalid, 0, -1)]
    reasons = {r["seed"]: r["reason"] for r in rejected}
    assert len(rejected) == len(bad) + 1
    for seed, words in bad.items():
        assert words in reasons[seed], (seed, reasons[seed])
    assert reasons["\ufffd\ufffd not utf-8"] == "seed is not UTF-8 text"
    assert all(r["at"] > 0 for r in rejected)
    log = worker_logs(tmp_path)
    lines = [line for line in log.splitlines() if "Rejected seed" in line]
    assert len(lines) == len(bad) + 1  # one WARNING line per rejected seed, with its reason
    for words in bad.values():
        assert any(words in line for line in lines), words
    assert final_stats(log)["frontier/seeds_invalid"] == len(bad) + 1
    assert cluster.snapshot().counters.get("seeds_invalid") == len(bad) + 1
    assert_no_crash(log)


# --- poison queue entries ------------------------------------------------------------


def test_poison_queue_entries_are_quarantined(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=60, categories=3)
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path)
    domain = "127.0.0.1"
    queue = cluster.keys.queue(domain)
    poison = {
        "garbage": "not JSON",
        '{"hello": "world"}': "not a request payload",
        json.dumps({"u": web.url("/item/1"), "d": domain, "f": "00" * 16,
                    "cb": "no_such_callback"}): "spider has no such method",
        json.dumps({"u": web.url("/item/2"), "d": domain, "f": "11" * 16,
                    "cls": "os.system"}): "is not a scrapy.Request subclass",
    }
    cluster.redis.zadd(queue, {entry: 0 for entry in poison})
    cluster.redis.zadd(cluster.keys.wait, {domain: 0})
    cluster.seed(web.url("/"))
    cluster.start(2)
    assert cluster.wait_done(180) == [0, 0]  # no worker crashed

    cluster.assert_complete(web)
    quarantined = [json.loads(q) for q in cluster.redis.lrange(cluster.keys.key("quarantine"), 0, -1)]
    reasons = {q["entry"]: q["reason"] for q in quarantined}
    assert set(reasons) == set(poison)
    for entry, words in poison.items():
        assert words in reasons[entry], (entry, reasons[entry])
    assert cluster.snapshot().counters.get("quarantined") == len(poison)
    log = worker_logs(tmp_path)
    assert log.count("Quarantined an undecodable queue entry") == len(poison)
    assert_no_crash(log)


# --- bad pages -------------------------------------------------------------------------


def test_bad_pages_are_counted_and_never_crash(redis_server, mongo_server, prefix, site, tmp_path):
    web = site(pages=20, categories=2, missing_links=2, extras=True)
    other = site(pages=5, categories=1)  # a forced seed into the redirect loop, a redirect
    cluster = Cluster(redis_server.url, mongo_server.uri, prefix, tmp_path,
                      DOWNLOAD_MAXSIZE=20000, REDIRECT_MAX_TIMES=5,
                      RETRY_BACKOFF_BASE=0.2, RETRY_JITTER=0,
                      THROTTLE_BACKOFF_BASE=0.1, THROTTLE_BACKOFF_MAX=0.2)
    cluster.seed(web.url("/"), web.url("/big?kb=100"),
                 json.dumps({"url": other.url("/loop/a"), "force": True}), other.url("/redirect/3"))
    cluster.start(1)
    assert cluster.wait_done(180) == [0]

    log = worker_logs(tmp_path)
    assert_no_crash(log)
    stats = final_stats(log)
    too_big = ("/big?kb=100", "/big?kb=256")
    # Everything reachable is stored, except what can never be: the always-failing
    # page and the pages over DOWNLOAD_MAXSIZE, which are dead letters instead.
    expected = web.spec.expected_urls(web.base_url) - {web.url("/fail/extras"), web.url(too_big[1])}
    stored = cluster.stored()
    assert all(n == 1 for n in stored.values())
    assert {u for u in stored if u.startswith(web.base_url + "/")} == expected
    dead = {r["url"]: r for r in map(json.loads, cluster.redis.hgetall(cluster.keys.key("dead")).values())}
    assert set(dead) == {web.url("/fail/extras")} | {web.url(p) for p in too_big}
    assert dead[web.url("/fail/extras")]["error"] == "HTTP 500"
    for path in too_big:
        assert dead[web.url(path)]["attempts"] == 1  # never retried: it would not shrink
        assert "larger than download max size (20000)" in dead[web.url(path)]["error"]
    assert stats["frontier/dead/HTTP 500"] == 1 and stats["retry/max_reached"] == 1
    assert stats["frontier/dead/DownloadCancelledError"] == 2 and stats["frontier/failed"] == 2

    # Non-HTML: two PDFs, the PNG and the XML sitemap are stored unparsed.
    assert stats["site/non_html"] == 4
    assert stats["site/empty_body"] == 1
    assert stats["site/bad_encoding"] == 1
    docs = {d["url"]: d for d in cluster.collection.find()}
    assert docs[web.url("/image.png")]["content_type"] == "image/png"
    assert docs[web.url("/files/1.pdf")]["content_type"] == "application/pdf"
    assert docs[web.url("/empty")]["text_length"] == 0
    assert docs[web.url("/broken-encoding")]["title"].startswith("Broken")
    assert docs[web.url("/status/410")]["status"] == 410
    assert stats["frontier/ignored/Forbidden by robots.txt"] == 2  # /private/x on both sites

    # The redirect loop: /loop/a -> /loop/b -> /loop/a, which the dupefilter drops.
    hits = fetch_counts(web.hits())
    assert hits["/loop/a"] == 1 and hits["/loop/b"] == 1
    assert not {web.url("/loop/a"), web.url("/loop/b")} & set(stored)
    # A forced seed bypasses the dupefilter: REDIRECT_MAX_TIMES ends that loop.
    loop_hits = fetch_counts(other.hits())
    assert loop_hits["/loop/a"] + loop_hits["/loop/b"] == 6  # the request and 5 redirects
    assert stats["frontier/ignored/max redirections reached"] == 1
    assert stats["downloader/response_status_count/302"] == 3 + 6 + 1  # + the /redirect/<n>
    # A redirect's item keeps the URL that was asked for, across the frontier hop.
    assert docs[other.url("/item/3")]["requested_url"] == other.url("/redirect/3")

    assert set(EXTRA_LINKS) <= set(hits)  # every special page was tried
    snap = cluster.snapshot()
    assert (snap.queued, snap.inflight, snap.delayed, snap.seeds, snap.seeds_pending) == (0, 0, 0, 0, 0)
