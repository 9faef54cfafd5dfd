"""``scrapy seed``: arguments, files, stdin, sitemaps, --json, --max-queue, errors, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymongo
import redis

from distscraper.frontier import codec
from distscraper.frontier.keys import FrontierKeys
from distscraper.producer import Producer
from distscraper.sandbox.site import SiteServer
from helpers import REPO_ROOT, scrapy_env, start_worker, wait_all

TWO32 = 2**32


def seed_cmd(args: list[str], prefix: str) -> list[str]:
    return [sys.executable, "-m", "scrapy", "seed", "-s", f"FRONTIER_KEY_PREFIX={prefix}", *args]


def run_seed(args: list[str], servers: tuple[str, str], prefix: str, stdin: str | bytes = b"",
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    out = subprocess.run(seed_cmd(args, prefix), cwd=REPO_ROOT, env=scrapy_env(*servers),
                         input=data, capture_output=True, timeout=timeout)
    return subprocess.CompletedProcess(out.args, out.returncode, out.stdout.decode(), out.stderr.decode())


def queued(client: redis.Redis, prefix: str, domain: str) -> dict[str, int]:
    """URL -> priority band of a domain queue."""
    rows = client.zrange(FrontierKeys(prefix).queue(domain), 0, -1, withscores=True)
    return {codec.loads(p)["u"]: int(score // TWO32) for p, score in rows}


def servers_of(redis_server: Any, mongo_server: Any) -> tuple[str, str]:
    return redis_server.url, mongo_server.uri


def test_seed_from_arguments_reports_added_skipped_rejected(
        redis_server: Any, mongo_server: Any, redis_client: redis.Redis, prefix: str) -> None:
    servers = servers_of(redis_server, mongo_server)
    out = run_seed(["http://a.example/", "http://a.example/x", "http://a.example/", "ftp://a.example/"],
                   servers, prefix)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{prefix}: added 2, skipped 1 (already seen or queued), rejected 1")
    assert "rejected 'ftp://a.example/': scheme 'ftp' is not http or https" in out.stdout
    assert queued(redis_client, prefix, "a.example") == {"http://a.example/": 0, "http://a.example/x": 0}
    again = run_seed(["--json", "--priority", "3", "http://a.example/x", "http://a.example/y"],
                     servers, prefix)
    assert json.loads(again.stdout) == {"frontier": prefix, "added": 1, "skipped": 1, "rejected": 0,
                                        "rejections": []}
    assert queued(redis_client, prefix, "a.example")["http://a.example/y"] == -3


def test_seed_from_a_file_and_from_stdin(redis_server: Any, mongo_server: Any,
                                         redis_client: redis.Redis, prefix: str, tmp_path: Path) -> None:
    servers = servers_of(redis_server, mongo_server)
    seeds = tmp_path / "seeds.txt"
    seeds.write_bytes(b"# my seeds\n\nhttp://f.example/1\n  http://f.example/2  \n"
                      b'{"url": "http://f.example/3", "priority": 8, "meta": {"k": "v"}}\n'
                      b'{"url": "http://f.example/4"\n\xff\xfe\n')
    out = run_seed(["--file", str(seeds), "--json"], servers, prefix)
    report = json.loads(out.stdout)
    assert (report["added"], report["skipped"], report["rejected"]) == (3, 0, 2), report
    assert {r["reason"].split(":")[0] for r in report["rejections"]} == {
        "malformed JSON", "seed is not UTF-8 text"}
    assert queued(redis_client, prefix, "f.example") == {
        "http://f.example/1": 0, "http://f.example/2": 0, "http://f.example/3": -8}

    out = run_seed(["--stdin", "--priority", "4", "--json"], servers, prefix,
                   stdin="http://f.example/1\nhttp://f.example/5\n# done\n")
    assert json.loads(out.stdout)["added"] == 1 and json.loads(out.stdout)["skipped"] == 1
    assert queued(redis_client, prefix, "f.example")["http://f.example/5"] == -4


def test_seed_from_a_sitemap(redis_server: Any, mongo_server: Any, redis_client: redis.Redis,
                             prefix: str, site: Callable[..., SiteServer]) -> None:
    server = site(pages=40, categories=4)
    out = run_seed(["--sitemap", server.url("/sitemap.xml"), "--json"],
                   servers_of(redis_server, mongo_server), prefix)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["added"] == 1 + 4 + 40
    urls = queued(redis_client, prefix, "127.0.0.1")
    assert server.url("/") in urls and server.url("/item/40") in urls and len(urls) == 45


def test_usage_errors_and_unreachable_redis(redis_server: Any, mongo_server: Any, prefix: str,
                                            tmp_path: Path) -> None:
    servers = servers_of(redis_server, mongo_server)
    for args in ([], ["--bogus", "http://x.example/"], ["--file", str(tmp_path / "none.txt")],
                 ["--max-queue", "0", "http://x.example/"], ["--priority", "high", "http://x.example/"],
                 ["--sitemap", "http://127.0.0.1:1/sitemap.xml"]):
        out = run_seed(args, servers, prefix)
        assert out.returncode == 2, (args, out)
        assert "error:" in out.stderr
    down = ("redis://:s3cret@127.0.0.1:1/0", servers[1])
    out = run_seed(["http://x.example/"], down, prefix)
    assert out.returncode == 1
    assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in out.stderr and "s3cret" not in out.stderr


def test_max_queue_blocks_while_the_queue_is_full(redis_server: Any, mongo_server: Any,
                                                  redis_client: redis.Redis, prefix: str,
                                                  tmp_path: Path) -> None:
    servers = servers_of(redis_server, mongo_server)
    with Producer(redis_server.url, settings={"FRONTIER_KEY_PREFIX": prefix}) as producer:
        assert producer.push_many([f"http://full.example/{i}" for i in range(5)]).added == 5
    log = tmp_path / "seed.out"
    with open(log, "wb") as stdout:
        proc = subprocess.Popen(seed_cmd(["--max-queue", "3", "--json", "http://new.example/1",
                                          "http://new.example/2"], prefix),
                                cwd=REPO_ROOT, env=scrapy_env(*servers), stdout=stdout,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        time.sleep(4)
        assert proc.poll() is None, log.read_text()  # still waiting for room
        assert not redis_client.exists(FrontierKeys(prefix).queue("new.example"))
        for _ in range(4):  # a worker takes requests off the queue
            redis_client.zpopmin(FrontierKeys(prefix).queue("full.example"))
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert json.loads(log.read_text())["added"] == 2
    assert len(queued(redis_client, prefix, "new.example")) == 2


def test_seeded_home_page_is_crawled_fully(redis_server: Any, mongo_server: Any,
                                           mongo_client: pymongo.MongoClient[Any], prefix: str,
                                           site: Callable[..., SiteServer], tmp_path: Path) -> None:
    server = site(pages=200)
    servers = servers_of(redis_server, mongo_server)
    out = run_seed([server.url("/")], servers, prefix)
    assert out.returncode == 0 and "added 1," in out.stdout, out
    worker = start_worker({"FRONTIER_KEY_PREFIX": prefix, "MONGO_DATABASE": prefix,
                           "MAX_IDLE_TIME_BEFORE_CLOSE": 3}, scrapy_env(*servers),
                          tmp_path / "worker.log")
    assert wait_all([worker], timeout=300) == [0]
    expected = server.spec.expected_urls(server.base_url)
    assert mongo_client[prefix]["site"].count_documents({}) == len(expected)
    assert {d["url"] for d in mongo_client[prefix]["site"].find({}, {"url": 1})} == expected
