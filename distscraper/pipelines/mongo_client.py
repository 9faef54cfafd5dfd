"""How the MongoDB pipeline reaches MongoDB: settings, connection, thread, error wording.

* :class:`MongoConfig` holds the validated ``MONGO_*`` settings, read only
  through :func:`distscraper.defaults.get`;
* :meth:`MongoConfig.connect` returns a client that answered a ping and the
  collection with its unique index on ``MONGO_UNIQUE_KEY``, or raises (and
  leaves no client open);
* :class:`MongoThread` runs the blocking MongoDB calls one at a time in a thread
  of their own, stopped by :meth:`MongoThread.stop` or at reactor shutdown;
* :func:`describe` words a MongoDB error in one short line, passwords masked.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from pymongo import MongoClient
from pymongo.errors import BulkWriteError
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from distscraper import defaults
from distscraper.masking import mask_url

if TYPE_CHECKING:
    from collections.abc import Callable

    from pymongo.collection import Collection
    from scrapy.settings import BaseSettings
    from twisted.internet.defer import Deferred

#: The one logger of the MongoDB pipeline, whichever of its modules logs.
LOGGER_NAME = "distscraper.pipelines.mongo"


@dataclass(frozen=True)
class MongoConfig:
    """The validated ``MONGO_*`` settings (attribute ``x`` is setting ``MONGO_X``)."""

    uri: str
    database: str
    collection: str
    unique_key: str
    batch_size: int
    flush_interval: float
    buffer_max: int
    retry_base: float
    retry_max: float
    connect_timeout: float
    close_timeout: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> MongoConfig:
        return cls(**{f.name: defaults.get(settings, "MONGO_" + f.name.upper())
                      for f in fields(cls)})

    @property
    def masked_uri(self) -> str:
        return mask_url(self.uri)

    def connect(self, collection: str) -> tuple[MongoClient[dict[str, Any]],
                                                 Collection[dict[str, Any]]]:
        """A client that answered a ping, and *collection* with its unique index (blocking)."""
        ms = int(self.connect_timeout * 1000)
        client: MongoClient[dict[str, Any]] = MongoClient(
            self.uri, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms,
            socketTimeoutMS=ms, appname="distscraper")
        try:
            client.admin.command("ping")
            coll = client[self.database][collection]
            coll.create_index(self.unique_key, unique=True)
        except BaseException:
            client.close()
            raise
        return client, coll


class MongoThread:
    """One thread for the blocking MongoDB calls, started at once; it stops for good
    on :meth:`stop` or at reactor shutdown, whichever comes first."""

    def __init__(self) -> None:
        self._pool: ThreadPool | None = ThreadPool(1, 1, name="distscraper-mongo")
        self._pool.start()
        self._shutdown_trigger: Any = reactor().addSystemEventTrigger(
            "during", "shutdown", self.stop)

    @property
    def running(self) -> bool:
        return self._pool is not None

    def run(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Deferred[Any]:
        """Call ``f(*args, **kwargs)`` in the thread; the Deferred fires on the reactor."""
        assert self._pool is not None
        return deferToThreadPool(reactor(), self._pool, f, *args, **kwargs)

    def stop(self) -> None:
        pool, self._pool = self._pool, None
        trigger, self._shutdown_trigger = self._shutdown_trigger, None
        if trigger is not None:
            try:
                reactor().removeSystemEventTrigger(trigger)
            except (ValueError, KeyError):  # already fired
                pass
        if pool is not None:
            pool.stop()


def describe(exc: BaseException) -> str:
    """A short, password-free description of a MongoDB error."""
    if isinstance(exc, BulkWriteError):
        errors = exc.details.get("writeErrors") or exc.details.get("writeConcernErrors") or [{}]
        text = (f"{len(errors)} write errors, first: code {errors[0].get('code')}: "
                f"{errors[0].get('errmsg')}")
    else:
        text = str(exc).split(", Topology Description:")[0]
    text = text if len(text) <= 300 else text[:297] + "..."
    return mask_url(f"{type(exc).__name__}: {text}")


def reactor() -> Any:
    """The installed Twisted reactor (imported late, once Scrapy installed it)."""
    from twisted.internet import reactor as installed

    return installed
