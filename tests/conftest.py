"""Fixtures for integration tests: real Redis, MongoDB and web-site servers, no mocks.

* ``redis_server`` / ``mongo_server`` (session): embedded servers, or the
  external ones named by ``REDIS_URL`` / ``MONGO_URI``; use ``.url`` / ``.uri``.
* ``redis_client`` / ``mongo_client`` (function): clients on those servers.
* ``prefix`` (function): a unique name for the test's Redis keys
  (``FRONTIER_KEY_PREFIX``) and Mongo database (``MONGO_DATABASE``); the keys
  ``<prefix>:*`` and the database are deleted after the test.
* ``site`` (function): ``site(**spec_kwargs) -> SiteServer``, started on a free
  127.0.0.1 port with a hit log in tmp_path, stopped after the test.

Helpers for running workers are in ``helpers.py`` (``from helpers import ...``).
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pymongo
import pytest
import redis

from distscraper.sandbox.servers import (
    MongoServer,
    RedisServer,
    mongo_uri_from_env,
    redis_url_from_env,
)

if TYPE_CHECKING:
    from distscraper.sandbox.site import SiteServer


@dataclass(frozen=True)
class ExternalRedis:
    """A Redis server the test session did not start (from REDIS_URL)."""

    url: str


@dataclass(frozen=True)
class ExternalMongo:
    """A MongoDB server the test session did not start (from MONGO_URI)."""

    uri: str


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | ExternalRedis]:
    """The session's Redis: REDIS_URL if set, else an embedded redis-server."""
    url = redis_url_from_env()
    if url:
        yield ExternalRedis(url)
        return
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def mongo_server() -> Iterator[MongoServer | ExternalMongo]:
    """The session's MongoDB: MONGO_URI if set, else an embedded SecantusDB."""
    uri = mongo_uri_from_env()
    if uri:
        yield ExternalMongo(uri)
        return
    server = MongoServer().start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def redis_client(redis_server: RedisServer | ExternalRedis) -> Iterator[redis.Redis]:
    """A redis.Redis (bytes replies) on the session's Redis."""
    client = redis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def mongo_client(mongo_server: MongoServer | ExternalMongo) -> Iterator[pymongo.MongoClient[Any]]:
    """A pymongo.MongoClient on the session's MongoDB."""
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(
        mongo_server.uri, serverSelectionTimeoutMS=10_000)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def prefix(redis_server: RedisServer | ExternalRedis,
           mongo_server: MongoServer | ExternalMongo) -> Iterator[str]:
    """A unique ``t<hex8>`` per test; its Redis keys and Mongo database are dropped afterwards."""
    name = f"t{uuid.uuid4().hex[:8]}"
    yield name
    _drop_redis_keys(redis_server.url, name)
    _drop_mongo_database(mongo_server.uri, name)


def _drop_redis_keys(url: str, name: str) -> None:
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{name}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                client.unlink(*batch)
                batch.clear()
        batch.append(name.encode())
        client.unlink(*batch)
    except redis.RedisError as exc:  # the test may have stopped the server
        warnings.warn(f"could not delete Redis keys {name}:*: {exc}", stacklevel=1)
    finally:
        client.close()


def _drop_mongo_database(uri: str, name: str) -> None:
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
    try:
        client.drop_database(name)
    except pymongo.errors.PyMongoError as exc:
        warnings.warn(f"could not drop Mongo database {name}: {exc}", stacklevel=1)
    finally:
        client.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Callable[..., "SiteServer"]]:
    """Factory: ``site(host="127.0.0.1", port=0, **spec_kwargs)`` starts a SiteServer.

    Each server logs hits to ``tmp_path/hits-<n>.jsonl``; all are stopped after the test.
    """
    from distscraper.sandbox.site import SiteServer, SiteSpec

    servers: list[SiteServer] = []

    def make(host: str = "127.0.0.1", port: int = 0, **spec_kwargs: Any) -> SiteServer:
        hits = tmp_path / f"hits-{len(servers)}.jsonl"
        server = SiteServer(SiteSpec(**spec_kwargs), host=host, port=port, hits_path=hits)
        server.start()
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.stop()
