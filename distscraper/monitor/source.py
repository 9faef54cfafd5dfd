"""Where the monitor commands read from, built from the project settings.

A :class:`StatusSource` holds one Redis client (``REDIS_URL``), one spider's
frontier keys (``FRONTIER_KEY_PREFIX``), a MongoDB client (``MONGO_URI``,
``MONGO_DATABASE``, ``MONGO_COLLECTION``) and ``HEARTBEAT_TTL``. Its clients
are thread-safe, so the dashboard's request threads share one source.
Reading never writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pymongo
import redis
from scrapy.settings import BaseSettings

from distscraper import defaults
from distscraper.frontier.connection import redis_from_settings
from distscraper.frontier.keys import FrontierKeys
from distscraper.masking import mask_url
from distscraper.monitor.figures import read_history
from distscraper.monitor.status import cluster_status, mongo_client


@dataclass
class StatusSource:
    """Clients and keys for one spider's cluster status."""

    server: redis.Redis
    keys: FrontierKeys
    mongo: pymongo.MongoClient[Any] | None
    database: str
    collection: str
    ttl: float
    redis_url: str = ""

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider: str = "site") -> "StatusSource":
        template = defaults.get(settings, "FRONTIER_KEY_PREFIX")
        uri = defaults.get(settings, "MONGO_URI")
        return cls(
            server=redis_from_settings(settings),
            keys=FrontierKeys.for_spider(spider, template),
            mongo=mongo_client(uri) if uri else None,
            database=defaults.get(settings, "MONGO_DATABASE"),
            collection=defaults.get(settings, "MONGO_COLLECTION") or spider,
            ttl=defaults.get(settings, "HEARTBEAT_TTL"),
            redis_url=mask_url(defaults.get(settings, "REDIS_URL")),
        )

    def status(self) -> dict[str, Any]:
        """:func:`~distscraper.monitor.status.cluster_status` of this cluster."""
        return cluster_status(self.server, self.keys, self.mongo, database=self.database,
                              collection=self.collection, ttl=self.ttl)

    def history(self, limit: int = 720) -> list[dict[str, Any]]:
        return read_history(self.server, self.keys, limit)

    def close(self) -> None:
        self.server.close()
        if self.mongo is not None:
            self.mongo.close()
