"""What cluster-wide politeness costs Redis: commands and round trips per request.

``python -m benchmarks.politeness`` starts its own Redis and drives the frontier's
exchange script directly (no HTTP, no Scrapy engine), like one worker would: push
every URL in batches of ``FRONTIER_PUSH_BATCH``, then lease ``FRONTIER_POP_BATCH``
at a time, acknowledging (and releasing the domain slots of) the previous batch
in the same round trip, and waiting ``wake_ms`` when nothing is due. Scenarios:

* ``off``: no delay and no concurrency cap, many domains (the cheapest frontier);
* ``on``: ``DOWNLOAD_DELAY`` and a cluster-wide ``CONCURRENT_REQUESTS_PER_DOMAIN``,
  the same many domains, a robots.txt Crawl-delay on every tenth one;
* ``on_one_domain``: the same politeness with a single domain, where the delay
  rather than Redis sets the pace (round trips are spent waiting for it).

Commands are ``INFO commandstats`` deltas (``cmdstat_*`` calls, the commands the
Lua script runs included; INFO itself excluded), ``redis_us`` the script's server
time. ``run()`` returns the figures as a dict (benchmarks/run.py calls it).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import redis
from scrapy import Request

from distscraper.frontier import codec
from distscraper.frontier.dupefilter import RedisDupeFilter
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.store import ExchangeParams, FrontierStore, Outbox
from distscraper.sandbox.servers import RedisServer

PUSH_BATCH = 200
POP_BATCH = 8


@dataclass(frozen=True)
class Scenario:
    name: str
    domains: int
    per_domain: int
    delay_ms: int = 0
    concurrency: int = 0
    crawl_delay_every: int = 0  # every n-th domain has a robots.txt Crawl-delay (0: none)


SCENARIOS = (
    Scenario("off", domains=200, per_domain=10),
    Scenario("on", domains=200, per_domain=10, delay_ms=50, concurrency=2, crawl_delay_every=10),
    Scenario("on_one_domain", domains=1, per_domain=100, delay_ms=20, concurrency=2),
)


def command_calls(server: redis.Redis) -> dict[str, int]:
    """Calls per command so far (INFO itself left out)."""
    stats = server.info("commandstats")
    return {name[len("cmdstat_"):]: int(v["calls"]) for name, v in stats.items()
            if name != "cmdstat_info"}


def script_usec(server: redis.Redis) -> int:
    stats = server.info("commandstats")
    return sum(int(stats[k]["usec"]) for k in ("cmdstat_evalsha", "cmdstat_eval") if k in stats)


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    out = {k: v - before.get(k, 0) for k, v in after.items()}
    return {k: v for k, v in out.items() if v}


class Meter:
    """Commands, script time and round trips between two points."""

    def __init__(self, server: redis.Redis) -> None:
        self.server = server
        self.calls = command_calls(server)
        self.usec = script_usec(server)
        self.round_trips = 0

    def read(self, requests: int) -> dict[str, Any]:
        calls = delta(command_calls(self.server), self.calls)
        total = sum(calls.values())
        return {
            "requests": requests,
            "round_trips": self.round_trips,
            "round_trips_per_request": round(self.round_trips / requests, 3),
            "commands": total,
            "commands_per_request": round(total / requests, 2),
            "redis_us_per_request": round((script_usec(self.server) - self.usec) / requests, 1),
            "top_commands": dict(sorted(calls.items(), key=lambda kv: -kv[1])[:8]),
        }


def simulate(server: redis.Redis, scenario: Scenario) -> dict[str, Any]:
    """Push then crawl every URL of *scenario* on a fresh prefix; the figures of both phases."""
    keys = FrontierKeys(f"bench-politeness-{scenario.name}-{os.getpid()}")
    store = FrontierStore(server, keys, RedisDupeFilter(server, keys.dupefilter).lua_prelude())
    params = ExchangeParams(node="bench", lease_ms=60_000, delay_ms=scenario.delay_ms,
                            concurrency=scenario.concurrency)
    total = scenario.domains * scenario.per_domain
    setup = Outbox()
    if scenario.crawl_delay_every:
        setup.crawl_delays = [(f"d{d}.bench", 2 * scenario.delay_ms)
                              for d in range(0, scenario.domains, scenario.crawl_delay_every)]
    store.exchange(setup, params)

    push = Meter(server)
    box = Outbox()
    for i in range(scenario.per_domain):
        for d in range(scenario.domains):
            request = Request(f"http://d{d}.bench/page/{i}")
            fp = os.urandom(16)
            box.pushes.append((fp, codec.domain_of(request), 0, codec.encode(request, None, fp), False))
            if len(box.pushes) == PUSH_BATCH:
                store.exchange(box, params)
                push.round_trips += 1
                box = Outbox()
    if box.pushes:
        store.exchange(box, params)
        push.round_trips += 1
    pushed = push.read(total)

    crawl = Meter(server)
    started = time.perf_counter()
    done = 0
    box = Outbox()
    while True:
        result = store.exchange(box, params, pop=POP_BATCH if done < total else 0)
        crawl.round_trips += 1
        box = Outbox()
        for payload, token, domain in result.popped:
            box.acks.append((payload, domain))
            if token:
                box.slot_releases.append((domain, token))
        done += len(result.popped)
        if done >= total and not len(box):
            break
        if not result.popped and done < total:
            time.sleep(max(result.wake_ms, 1) / 1000 if result.wake_ms >= 0 else 0.005)
    crawled = crawl.read(total)
    crawled["seconds"] = round(time.perf_counter() - started, 3)
    for key in server.scan_iter(match=keys.prefix + ":*", count=1000):
        server.unlink(key)
    return {"scenario": scenario.__dict__, "push": pushed, "crawl": crawled,
            "commands_per_request": round(pushed["commands_per_request"] + crawled["commands_per_request"], 2),
            "round_trips_per_request": round((pushed["round_trips"] + crawled["round_trips"]) / total, 3)}


def run(redis_url: str | None = None) -> dict[str, Any]:
    """Every scenario; on *redis_url* if given (its commandstats must be quiet), else a fresh Redis."""
    own = RedisServer().start() if redis_url is None else None
    try:
        server = redis.Redis.from_url(own.url if own is not None else str(redis_url))
        results: dict[str, Any] = {"redis": server.info("server")["redis_version"],
                                   "pop_batch": POP_BATCH, "push_batch": PUSH_BATCH}
        simulate(server, Scenario("warm-up", domains=5, per_domain=2))  # script load, first keys
        for scenario in SCENARIOS:
            results[scenario.name] = simulate(server, scenario)
        server.close()
        return results
    finally:
        if own is not None:
            own.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default=None, help="use this Redis instead of starting one")
    args = parser.parse_args()
    print(json.dumps(run(args.redis_url), indent=2))


if __name__ == "__main__":
    main()
