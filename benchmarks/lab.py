"""The servers every benchmark shares: Redis, MongoDB (wire protocol) and the nginx site.

:class:`Lab` starts them on free loopback ports in a temporary directory,
gives each benchmark run a clean slate (:meth:`Lab.reset`: FLUSHALL and every
database dropped) and stops everything it started, by PID, on :meth:`close`.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymongo
import redis

from benchmarks.static_site import StaticSite
from benchmarks.workers import scrapy_env
from distscraper.sandbox.servers import MongoServer, RedisServer
from distscraper.sandbox.site import SiteSpec


@dataclass
class Lab:
    """Shared servers and options of one benchmark session."""

    pages: int
    runs: int
    quick: bool
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="distscraper-bench-")))
    keep: bool = False

    def __post_init__(self) -> None:
        self.work.chmod(0o755)  # nginx's worker (www-data) reads the site below it
        self.redis_server = RedisServer(data_dir=self.work / "redis")
        self.mongo_server = MongoServer(storage=":memory:", work_dir=self.work / "mongo")
        self.site = StaticSite(SiteSpec(pages=self.pages), self.work / "site")
        self.redis: redis.Redis | None = None
        self.mongo: pymongo.MongoClient[Any] | None = None

    def start(self) -> "Lab":
        self.redis_server.start()
        self.mongo_server.start()
        self.site.render()
        self.site.start()
        self.redis = redis.Redis.from_url(self.redis_server.url)
        self.mongo = pymongo.MongoClient(self.mongo_server.uri, serverSelectionTimeoutMS=10_000)
        return self

    @property
    def env(self) -> dict[str, str]:
        return scrapy_env(self.redis_server.url, self.mongo_server.uri)

    def log_dir(self, name: str) -> Path:
        path = self.work / "logs" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def reset(self) -> None:
        """An empty Redis and MongoDB for the next run."""
        assert self.redis is not None and self.mongo is not None
        self.redis.flushall()
        for name in self.mongo.list_database_names():
            if name not in ("admin", "local", "config"):
                self.mongo.drop_database(name)

    def close(self) -> None:
        for closer in (self.redis, self.mongo):
            if closer is not None:
                closer.close()
        self.site.stop()
        self.mongo_server.stop()
        self.redis_server.stop()
        if not self.keep:
            shutil.rmtree(self.work, ignore_errors=True)
