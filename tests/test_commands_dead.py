"""``scrapy dead``, ``scrapy quarantine`` and ``scrapy invalid`` on hand-made letters in a real Redis."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import redis
from scrapy import Request
from scrapy.utils.request import fingerprint

from distscraper.commands._letters import DeadLetters
from distscraper.frontier import codec
from distscraper.frontier.dupefilter import RedisDupeFilter
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.store import FrontierStore
from helpers import REPO_ROOT, scrapy_env

TWO32 = 2**32


def scrapy(args: list[str], redis_server: Any, mongo_server: Any,
           prefix: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "scrapy", *args, "-s", f"FRONTIER_KEY_PREFIX={prefix}"]
    return subprocess.run(cmd, cwd=REPO_ROOT, env=scrapy_env(redis_server.url, mongo_server.uri),
                          capture_output=True, text=True, timeout=60)


def mark_seen(client: redis.Redis, prefix: str, fp: bytes) -> None:
    """Add *fp* to the workers' seen-set through its own Lua, whatever its layout."""
    prelude = RedisDupeFilter(client, FrontierKeys(prefix).dupefilter).lua_prelude()
    client.register_script(prelude + "\nreturn seen_add(ARGV[2])")(args=[prefix + ":", fp])


def add_dead(client: redis.Redis, prefix: str, url: str, priority: int = 0,
             age: float = 0.0) -> str:
    """A dead letter as the retry middleware writes it; returns its fingerprint (hex)."""
    request = Request(url, priority=priority, meta={"root_domain": "d.example"})
    fp = fingerprint(request)[:16]
    now = time.time() - age
    payload = codec.encode(request, None, fp, attempts=3, first_attempt=now - 30)
    mark_seen(client, prefix, fp)  # it was seen, long ago
    client.hset(FrontierKeys(prefix).dead, fp.hex(), FrontierStore.record(
        url=url, error="TimeoutError: took longer than 30.0 seconds", attempts=3,
        first_attempt=now - 30, last_attempt=now, node="w1", payload=payload.decode()))
    return fp.hex()


def test_dead_list_human_and_json(redis_server: Any, mongo_server: Any, redis_client: redis.Redis,
                                  prefix: str) -> None:
    old = add_dead(redis_client, prefix, "http://d.example/old", age=60)
    new = add_dead(redis_client, prefix, "http://d.example/new")
    out = scrapy(["dead", "list"], redis_server, mongo_server, prefix)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"2 dead letters in {prefix}:dead"
    assert lines[1].split()[0] == new and "attempts=3" in lines[1] and "http://d.example/new" in lines[1]
    assert lines[2].split()[0] == old and "TimeoutError" in lines[2]
    out = scrapy(["dead", "list", "--json", "--limit", "1"], redis_server, mongo_server, prefix)
    report = json.loads(out.stdout)
    assert report["total"] == 2 and len(report["entries"]) == 1
    entry = report["entries"][0]
    assert entry["fingerprint"] == new and entry["url"] == "http://d.example/new"
    assert codec.loads(entry["payload"])["n"] == 3


def test_dead_requeue_by_pattern_then_all(redis_server: Any, mongo_server: Any,
                                          redis_client: redis.Redis, prefix: str) -> None:
    keys = FrontierKeys(prefix)
    add_dead(redis_client, prefix, "http://d.example/a", priority=5)
    add_dead(redis_client, prefix, "http://d.example/b")
    kept = add_dead(redis_client, prefix, "http://e.example/c")
    out = scrapy(["dead", "requeue", "--pattern", r"^http://d\.example/"], redis_server, mongo_server,
                 prefix)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (f"{prefix}:dead: requeue 2 matching dead letters: "
                                  "requeued 2, changed 0, undecodable 0")
    assert [k.decode() for k in redis_client.hkeys(keys.dead)] == [kept]
    rows = redis_client.zrange(keys.queue("d.example"), 0, -1, withscores=True)
    requeued = {codec.loads(p)["u"]: (codec.loads(p), int(score // TWO32)) for p, score in rows}
    assert set(requeued) == {"http://d.example/a", "http://d.example/b"}  # despite the dupefilter
    payload, band = requeued["http://d.example/a"]
    assert band == -5 and "n" not in payload and "t0" not in payload  # attempts reset
    assert payload["m"] == {"root_domain": "d.example"}
    assert redis_client.zscore(keys.wait, "d.example") is not None  # the domain is scheduled
    assert int(redis_client.hget(keys.stats, "dead_requeued")) == 2

    out = scrapy(["dead", "requeue", "--all", "--json"], redis_server, mongo_server, prefix)
    assert json.loads(out.stdout) == {"key": f"{prefix}:dead", "action": "requeue", "matched": 1,
                                      "requeued": 1, "changed": 0, "undecodable": 0}
    assert redis_client.hlen(keys.dead) == 0
    assert redis_client.zcard(keys.queue("e.example")) == 1


def test_requeue_into_a_ready_domain_keeps_it_ready(redis_client: redis.Redis, prefix: str) -> None:
    keys = FrontierKeys(prefix)
    add_dead(redis_client, prefix, "http://d.example/urgent", priority=9)
    redis_client.zadd(keys.ready, {"d.example": 0 * TWO32 + 1})
    box = DeadLetters(redis_client, keys)
    assert box.requeue(box.entries()) == {"requeued": 1, "changed": 0, "undecodable": 0}
    assert redis_client.zscore(keys.wait, "d.example") is None
    assert int(redis_client.zscore(keys.ready, "d.example") // TWO32) == -9  # moved up to its band


def test_requeue_never_loses_an_entry_changed_or_undecodable(redis_client: redis.Redis,
                                                             prefix: str) -> None:
    keys = FrontierKeys(prefix)
    fp = add_dead(redis_client, prefix, "http://d.example/x")
    redis_client.hset(keys.dead, "bad", json.dumps({"url": "http://d.example/bad", "payload": "{"}))
    box = DeadLetters(redis_client, keys)
    letters = box.entries()
    add_dead(redis_client, prefix, "http://d.example/x", age=-5)  # it died again meanwhile
    assert box.requeue(letters) == {"requeued": 0, "changed": 1, "undecodable": 1}
    assert sorted(k.decode() for k in redis_client.hkeys(keys.dead)) == sorted([fp, "bad"])
    assert not redis_client.exists(keys.queue("d.example"))
    assert box.requeue(box.entries())["requeued"] == 1


def test_dead_purge_and_usage_errors(redis_server: Any, mongo_server: Any,
                                     redis_client: redis.Redis, prefix: str) -> None:
    keys = FrontierKeys(prefix)
    for path in ("a", "b", "c"):
        add_dead(redis_client, prefix, f"http://d.example/{path}")
    out = scrapy(["dead", "purge", "--pattern", "/(a|b)$"], redis_server, mongo_server, prefix)
    assert out.stdout.strip() == f"{prefix}:dead: purge 2 matching dead letters: purged 2"
    assert redis_client.hlen(keys.dead) == 1
    out = scrapy(["dead", "purge", "--all", "--json"], redis_server, mongo_server, prefix)
    assert json.loads(out.stdout)["purged"] == 1 and not redis_client.exists(keys.dead)
    assert not redis_client.exists(keys.queue("d.example"))
    for args in (["dead"], ["dead", "requeue"], ["dead", "purge", "--all", "--pattern", "x"],
                 ["dead", "purge", "--pattern", "("], ["quarantine", "requeue", "--all"]):
        out = scrapy(args, redis_server, mongo_server, prefix)
        assert out.returncode == 2 and "error:" in out.stderr, (args, out)
    down = SimpleNamespace(url="redis://:s3cret@127.0.0.1:1/0")
    out = scrapy(["dead", "list"], down, mongo_server, prefix)
    assert out.returncode == 1 and "s3cret" not in out.stderr
    assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in out.stderr


def test_quarantine_and_invalid_seeds_list_and_purge(redis_server: Any, mongo_server: Any,
                                                     redis_client: redis.Redis, prefix: str) -> None:
    keys = FrontierKeys(prefix)
    for entry in ("not json", '{"u": 1}'):
        redis_client.lpush(keys.quarantine, json.dumps(
            {"entry": entry, "reason": "undecodable queue entry", "at": time.time()}))
    for seed, reason in (("ftp://x", "scheme 'ftp' is not http or https"), ("{bad", "malformed JSON")):
        redis_client.lpush(keys.seeds_invalid, json.dumps({"seed": seed, "reason": reason,
                                                           "at": time.time()}))
    out = scrapy(["quarantine", "list"], redis_server, mongo_server, prefix)
    lines = out.stdout.splitlines()
    assert lines[0] == f"2 quarantined entries in {prefix}:quarantine"
    assert lines[1].endswith('{"u": 1}') and "undecodable queue entry" in lines[1]
    out = scrapy(["invalid", "list", "--json"], redis_server, mongo_server, prefix)
    report = json.loads(out.stdout)
    assert report["total"] == 2 and report["entries"][0]["seed"] == "{bad"
    out = scrapy(["invalid", "purge", "--pattern", "^ftp:"], redis_server, mongo_server, prefix)
    assert out.stdout.strip() == f"{prefix}:start_urls:invalid: purge 1 matching invalid seeds: purged 1"
    assert [json.loads(x)["seed"] for x in redis_client.lrange(keys.seeds_invalid, 0, -1)] == ["{bad"]
    out = scrapy(["quarantine", "purge", "--all"], redis_server, mongo_server, prefix)
    assert out.stdout.strip() == f"{prefix}:quarantine: purge all quarantined entries: purged 2"
    assert not redis_client.exists(keys.quarantine)
