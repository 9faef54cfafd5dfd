"""Redis clients built from Scrapy settings (``REDIS_URL``, ``REDIS_PARAMS``)."""

from __future__ import annotations

import redis
from scrapy.settings import BaseSettings

from distscraper import defaults

#: Client options; REDIS_PARAMS overrides them. Short timeouts keep the reactor
#: responsive while Redis is down: the frontier retries with back-off instead.
CLIENT_DEFAULTS = {
    "socket_timeout": 5,
    "socket_connect_timeout": 2,
    "health_check_interval": 15,
}


def redis_from_settings(settings: BaseSettings) -> redis.Redis:
    """A client for REDIS_URL. It does not connect until first used."""
    params = dict(CLIENT_DEFAULTS)
    params.update(settings.getdict("REDIS_PARAMS"))
    params.pop("encoding", None)  # payloads are bytes
    params.pop("decode_responses", None)
    return redis.Redis.from_url(defaults.get(settings, "REDIS_URL"), **params)
