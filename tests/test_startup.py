"""A worker fails fast, with a clear and password-free message, when a server is down."""

from __future__ import annotations

import subprocess
import sys
import time

from helpers import REPO_ROOT, scrapy_env

from distscraper.sandbox.servers import free_port


def crawl(env: dict[str, str]) -> tuple[int, str, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "site"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def test_redis_down(mongo_server):
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    code, log, took = crawl(scrapy_env(url, mongo_server.uri))
    assert code != 0 and took < 60
    assert "cannot reach Redis at redis://:***@127.0.0.1" in log
    assert "hunter2" not in log


def test_mongo_down(redis_server):
    uri = f"mongodb://app:hunter2@127.0.0.1:{free_port()}/"
    code, log, took = crawl(scrapy_env(redis_server.url, uri))
    assert code != 0 and took < 60
    assert "mongodb://app:***@127.0.0.1" in log
    assert "hunter2" not in log
