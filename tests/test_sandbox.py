"""The test infrastructure itself: site generator, site server, embedded servers, fixtures."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable
from urllib.parse import urlsplit

import pymongo
import pytest
import redis
import requests

from distscraper.sandbox.servers import MongoServer, RedisServer, ServerError
from distscraper.sandbox.site import EXTRA_LINKS, SiteServer, SiteSpec
from helpers import REPO_ROOT, fetch_counts, scrapy_env, setting_arg

Site = Callable[..., SiteServer]

_HREF = re.compile(r'<a [^>]*href="([^"]+)"')

_FINGERPRINT = """
import hashlib, sys
from distscraper.sandbox.site import SiteSpec
spec = SiteSpec(seed=int(sys.argv[1]), pages=300, extras=True)
h = hashlib.sha256()
for path in sorted(spec.expected_paths()):
    h.update(path.encode())
    h.update(spec.render(path, "http://h:1").body)
print(h.hexdigest())
"""


def _fingerprint(seed: int, hashseed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hashseed, PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run([sys.executable, "-c", _FINGERPRINT, str(seed)], env=env, cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.strip()


# --- generator -----------------------------------------------------------------


def test_generator_is_deterministic_across_processes() -> None:
    first = _fingerprint(7, "1")
    assert first == _fingerprint(7, "2")
    assert first != _fingerprint(8, "1")


def test_default_spec_reaches_at_least_2000_pages() -> None:
    spec = SiteSpec()
    paths = spec.expected_paths()
    assert len(paths) >= 2000
    assert {f"/item/{i}" for i in range(1, spec.pages + 1)} <= paths
    assert {f"/missing/{k}" for k in range(1, spec.missing_links + 1)} <= paths
    assert "/private/x" not in paths and "/private/x" in spec.links("/")
    ok = spec.expected_ok_paths()
    assert paths - ok == {f"/missing/{k}" for k in range(1, spec.missing_links + 1)}
    assert not any(p in paths for p in EXTRA_LINKS)


def test_rendered_links_match_the_graph() -> None:
    spec = SiteSpec(seed=3, pages=200, categories=4, per_page=10, extras=True)
    for path in ["/", "/cat/1/", "/cat/2/page/2", "/item/5", "/item/150"]:
        reply = spec.render(path, "http://h:1")
        assert reply.status == 200
        text = reply.body.decode()
        for tag in ("<title>", '<meta name="description"', '<link rel="canonical" href="http://h:1',
                    "<h1>", "<h2>", "<p>"):
            assert tag in text, (path, tag)
        assert set(_HREF.findall(text.replace("&amp;", "&"))) == set(spec.links(path)), path


def test_extras_expected_statuses() -> None:
    statuses = SiteSpec(pages=50, categories=2, extras=True).expected_statuses()
    assert statuses["/flaky/extras?fails=2"] == 200
    assert statuses["/fail/extras"] == 500
    assert statuses["/status/410"] == 410
    assert "/loop/a" not in statuses and "/redirect/1" not in statuses
    assert statuses["/item/1"] == 200


# --- server --------------------------------------------------------------------


def test_server_answers_pages_404s_and_logs_hits(site: Site) -> None:
    server = site(pages=100, categories=4, crawl_delay=1.5)
    base = server.base_url
    with requests.Session() as http:
        home = http.get(base + "/")
        assert home.status_code == 200 and "<title>Sandbox shop</title>" in home.text
        assert http.get(base + "/item/1").status_code == 200
        assert http.get(base + "/missing/1").status_code == 404
        assert http.get(base + "/no/such/page").status_code == 404
        robots = http.get(base + "/robots.txt")
        assert "Disallow: /private/" in robots.text and "Crawl-delay: 1.5" in robots.text
    hits = server.hits()
    assert [(h["path"], h["status"]) for h in hits] == [
        ("/", 200), ("/item/1", 200), ("/missing/1", 404), ("/no/such/page", 404),
        ("/robots.txt", 200)]
    assert all(h["host"] == f"127.0.0.1:{server.port}" and isinstance(h["t"], float) for h in hits)
    assert server.hits_path is not None
    lines = open(server.hits_path).read().splitlines()
    assert [json.loads(line)["path"] for line in lines] == [h["path"] for h in hits]


def test_flaky_ratelimit_and_special_pages(site: Site) -> None:
    server = site(pages=20, categories=2)
    base = server.base_url
    get = lambda path, **kw: requests.get(base + path, allow_redirects=False, timeout=10, **kw)  # noqa: E731
    assert [get("/flaky/a?fails=2").status_code for _ in range(4)] == [503, 503, 200, 200]
    assert get("/flaky/b").status_code == 503 and get("/flaky/b").status_code == 200
    limited = get("/ratelimit/a?n=1")
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "1"
    assert get("/ratelimit/a?n=1").status_code == 200
    assert get("/fail/x").status_code == 500 and get("/fail/x").status_code == 500
    assert get("/status/418").status_code == 418
    assert get("/loop/a").headers["Location"] == "/loop/b"
    assert get("/loop/b").headers["Location"] == "/loop/a"
    assert get("/redirect/5").headers["Location"] == "/item/5"
    pdf = get("/files/3.pdf")
    assert pdf.headers["Content-Type"] == "application/pdf" and pdf.content.startswith(b"%PDF")
    png = get("/image.png")
    assert png.headers["Content-Type"] == "image/png" and png.content.startswith(b"\x89PNG")
    empty = get("/empty")
    assert empty.status_code == 200 and empty.content == b""
    assert empty.headers["Content-Type"].startswith("text/html")
    broken = get("/broken-encoding")
    with pytest.raises(UnicodeDecodeError):
        broken.content.decode("utf-8")
    assert len(get("/big?kb=10").content) == 10 * 1024
    assert get("/private/x").status_code == 200
    assert f"<loc>{base}/item/20</loc>" in get("/sitemap.xml").text
    started = time.monotonic()
    assert get("/slow?s=0.3").status_code == 200
    assert time.monotonic() - started >= 0.3
    counts = fetch_counts(server.hits())
    assert counts["/flaky/a?fails=2"] == 4 and counts["/fail/x"] == 2


def test_concurrent_crawl_of_the_site_finds_expected_paths(site: Site) -> None:
    """A tiny robots-obeying crawler over HTTP reaches exactly expected_paths()."""
    spec_kwargs: dict[str, Any] = dict(pages=600, categories=6, per_page=20, missing_links=5)
    server = site(**spec_kwargs)
    spec = SiteSpec(**spec_kwargs)
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=16))

    def fetch(path: str) -> tuple[str, int, list[str]]:
        resp = session.get(server.base_url + path, timeout=10)
        return path, resp.status_code, _HREF.findall(resp.text)

    found: dict[str, int] = {}
    seen = {"/"}
    frontier = deque(["/"])
    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        while frontier:
            batch = [frontier.popleft() for _ in range(len(frontier))]
            for path, status, links in pool.map(fetch, batch):
                found[path] = status
                for link in links:
                    link = urlsplit(link).path or link
                    if link not in seen and spec.allowed(link):
                        seen.add(link)
                        frontier.append(link)
    elapsed = time.monotonic() - started
    assert found == spec.expected_statuses()
    assert len(server.hits()) == len(found)
    assert elapsed < 15, f"{len(found)} pages took {elapsed:.1f}s"


def test_two_domains_on_the_same_port(site: Site) -> None:
    one = site(pages=10, categories=1)
    two = site(host="127.0.0.2", port=one.port, pages=10, categories=1, seed=2)
    assert one.port == two.port
    assert requests.get(one.url("/item/1"), timeout=5).status_code == 200
    assert requests.get(two.url("/item/2"), timeout=5).status_code == 200
    assert [h["host"] for h in one.hits()] == [f"127.0.0.1:{one.port}"]
    assert [(h["host"], h["path"]) for h in two.hits()] == [(f"127.0.0.2:{one.port}", "/item/2")]


def test_stopped_site_refuses_connections(site: Site) -> None:
    server = site(pages=10, categories=1)
    with requests.Session() as http:  # a keep-alive connection must not outlive stop()
        assert http.get(server.url("/")).status_code == 200
        server.stop()
        with pytest.raises(requests.ConnectionError):
            http.get(server.url("/"), timeout=2)


def test_site_cli_runs_in_its_own_process(tmp_path: Any) -> None:
    hits = tmp_path / "hits.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "distscraper.sandbox.site", "--port", "0", "--pages", "30",
         "--crawl-delay", "0.25", "--extras", "--hits", str(hits)],
        cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("READY http://127.0.0.1:"), line
        base = line.split()[1]
        assert "Crawl-delay: 0.25" in requests.get(base + "/robots.txt", timeout=5).text
        assert "/flaky/extras?fails=2" in requests.get(base + "/", timeout=5).text
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0
        assert proc.stderr is not None and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert [json.loads(x)["path"] for x in hits.read_text().splitlines()] == ["/robots.txt", "/"]


# --- embedded servers ------------------------------------------------------------


def test_redis_restart_with_appendonly_keeps_data() -> None:
    with RedisServer(appendonly=True) as server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        first_pid = server.pid
        server.kill()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        server.restart()
        assert server.pid != first_pid
        assert client.get("k") == b"v"
        busy = RedisServer(port=server.port)
        try:
            with pytest.raises(ServerError, match="in use"):
                busy.start()
        finally:
            busy.cleanup()
        client.close()
    assert server.pid is None and not server.dir.exists()


def test_mongo_restart_keeps_documents() -> None:
    with MongoServer() as server:
        client: pymongo.MongoClient[Any] = pymongo.MongoClient(server.uri,
                                                               serverSelectionTimeoutMS=10_000)
        client.db.things.insert_one({"name": "kept"})
        server.restart()
        assert client.db.things.find_one({}, {"_id": 0}) == {"name": "kept"}
        client.close()
    assert server.pid is None and not server.dir.exists()


def test_fixtures_give_working_clients(redis_client: redis.Redis, mongo_client: Any,
                                       prefix: str) -> None:
    assert re.fullmatch(r"t[0-9a-f]{8}", prefix)
    redis_client.set(f"{prefix}:x", 1)
    assert redis_client.get(f"{prefix}:x") == b"1"
    mongo_client[prefix].items.insert_one({"url": "http://x/"})
    assert mongo_client[prefix].items.count_documents({}) == 1


def test_helpers() -> None:
    env = scrapy_env("redis://r", "mongodb://m")
    assert env["REDIS_URL"] == "redis://r" and env["PYTHONPATH"] == str(REPO_ROOT)
    assert "SCRAPY_SETTINGS_MODULE" not in env
    assert setting_arg(True) == "True" and setting_arg(["a", "b"]) == "a,b"
    assert setting_arg([["^/item", 5]]) == '[["^/item", 5]]'
    assert fetch_counts([{"path": "/a"}, {"path": "/a"}, {"path": "/b"}]) == {"/a": 2, "/b": 1}
