"""The cluster status model behind ``scrapy status`` and ``scrapy dashboard``. Read-only.

:func:`cluster_status` returns one JSON-able dict: frontier figures (one
MULTI/EXEC, see :mod:`distscraper.monitor.figures`), live nodes (``<prefix>:nodes``
entries younger than the TTL whose ``<prefix>:node:<id>`` key still exists),
documents in MongoDB, rates and an ETA. It never writes to Redis or MongoDB.

Rates: the cluster's pages per minute is the growth of the ``done`` counter
since the oldest ``<prefix>:history`` sample of the last minute (``rate_source``
"history"); with less than 5 s of history it is the sum of the live nodes'
own rates ("nodes"). A domain's pace is the sum of the per-domain rates the
live nodes put in their heartbeats (each node reports its 20 busiest domains).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pymongo
import redis
from pymongo.errors import PyMongoError

from distscraper.frontier.keys import FrontierKeys
from distscraper.monitor.figures import read_figures

TOP_DOMAINS = 10
RATE_WINDOW = 60.0
MIN_RATE_SPAN = 5.0
MONGO_TIMEOUT_MS = 2000


def count_documents(mongo: str | pymongo.MongoClient[Any] | None, database: str,
                    collection: str) -> int | None:
    """Documents in the items collection (collection metadata: fast); None if unknown."""
    if mongo is None:
        return None
    client = mongo if isinstance(mongo, pymongo.MongoClient) else mongo_client(mongo)
    try:
        return int(client[database][collection].estimated_document_count(maxTimeMS=MONGO_TIMEOUT_MS))
    except PyMongoError:
        return None
    finally:
        if client is not mongo:
            client.close()


def mongo_client(uri: str) -> pymongo.MongoClient[Any]:
    """A client that gives up on an unreachable server within 2 s."""
    return pymongo.MongoClient(uri, serverSelectionTimeoutMS=MONGO_TIMEOUT_MS,
                               connectTimeoutMS=MONGO_TIMEOUT_MS, socketTimeoutMS=MONGO_TIMEOUT_MS)


def live_nodes(server: redis.Redis, keys: FrontierKeys, ids: list[str], now: float) -> list[dict[str, Any]]:
    """The heartbeats of *ids* whose key has not expired, sorted by node id."""
    if not ids:
        return []
    nodes = []
    for node_id, raw in zip(ids, server.mget([keys.node(i) for i in ids])):
        if raw is None:
            continue  # the key expired: the node is gone even if the index still names it
        try:
            beat = json.loads(raw)
        except ValueError:
            continue
        if isinstance(beat, dict):
            beat["id"] = node_id
            beat["age_s"] = round(max(now - float(beat.get("beat", now)), 0.0), 1)
            nodes.append(beat)
    return sorted(nodes, key=lambda n: n["id"])


def cluster_rate(history: list[dict[str, Any]], done_now: int, now: float,
                 nodes: list[dict[str, Any]]) -> tuple[float, str]:
    """Pages per minute over the last minute, and where the figure comes from.

    With no live node nothing is being fetched: the rate is 0 ("nodes").
    """
    recent = [s for s in history if now - RATE_WINDOW <= s["t"] <= now]
    if nodes and recent and now - recent[0]["t"] >= MIN_RATE_SPAN:
        grown = max(done_now - int(recent[0].get("done", 0)), 0)
        return round(grown * 60.0 / (now - recent[0]["t"]), 1), "history"
    return round(sum((float(n.get("pages_per_min", 0)) for n in nodes), 0.0), 1), "nodes"


def cluster_status(server: redis.Redis, keys: FrontierKeys,
                   mongo_uri: str | pymongo.MongoClient[Any] | None = None, *,
                   database: str = "distscraper", collection: str = "site",
                   ttl: float = 10.0) -> dict[str, Any]:
    """Everything ``scrapy status --json`` prints (see module docstring)."""
    now = time.time()
    fig = read_figures(server, keys, nodes_since_ms=int((now - ttl) * 1000), history=True)
    nodes = live_nodes(server, keys, fig.node_ids, now)
    rate, source = cluster_rate(fig.history, fig.done, now, nodes)
    work = fig.queued + fig.inflight + fig.delayed
    pace: Counter[str] = Counter()
    for node in nodes:
        for domain, ppm in (node.get("domains") or {}).items():
            pace[domain] += float(ppm)
    by_queue = sorted(fig.by_domain.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_DOMAINS]
    by_pace = sorted(pace.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_DOMAINS]
    return {
        "frontier": keys.prefix,
        "at": round(now, 3),
        "queued": fig.queued,
        "queue_bands": fig.bands,
        "inflight": fig.inflight,
        "delayed": fig.delayed,
        "dead": fig.dead,
        "seen": fig.seen,
        "seeds": fig.seeds,
        "seeds_pending": fig.seeds_pending,
        "invalid_seeds": fig.invalid_seeds,
        "quarantined": fig.quarantined,
        "done": fig.done,
        "errors": fig.errors,
        "documents": count_documents(mongo_uri, database, collection),
        "live_nodes": len(nodes),
        "nodes": nodes,
        "pages_per_min": rate,
        "rate_source": source,
        "eta_s": 0.0 if work == 0 else round(work * 60.0 / rate, 1) if rate > 0 else None,
        "top_domains_by_queue": [{"domain": d, "queued": n} for d, n in by_queue],
        "top_domains_by_pace": [{"domain": d, "pages_per_min": round(p, 1)} for d, p in by_pace],
        "counters": fig.counters,
    }


# -- the human table ------------------------------------------------------------------
def duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12s``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Left-aligned columns, two spaces apart."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
            for row in [header, *rows]]


def format_status(status: dict[str, Any]) -> str:
    """A compact table of :func:`cluster_status`'s figures."""
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status["at"]))
    bands = "  ".join(f"{b} {n}" for b, n in status["queue_bands"].items())
    docs = "-" if status["documents"] is None else status["documents"]
    lines = [
        f"frontier {status['frontier']}  at {at}  nodes {status['live_nodes']}  "
        f"{status['pages_per_min']:.1f} pages/min  ETA {duration(status['eta_s'])}",
        "",
        *table(["queued", "in flight", "delayed", "dead", "seen", "done", "documents", "errors"],
               [[status[k] if k != "documents" else docs for k in
                 ("queued", "inflight", "delayed", "dead", "seen", "done", "documents", "errors")]]),
        f"  by priority: {bands}",
        f"  seeds {status['seeds']}  pending {status['seeds_pending']}  "
        f"invalid {status['invalid_seeds']}  quarantined {status['quarantined']}",
        "",
    ]
    now = status["at"]
    rows = [[n["id"], n.get("host", "?"), n.get("pid", "?"),
             duration(now - n["started"]) if "started" in n else "-",
             n.get("pages", 0), n.get("items", 0), f"{float(n.get('pages_per_min', 0)):.1f}",
             n.get("inflight", 0), f"{n['age_s']:.1f}s",
             ((n.get("last_error") or {}).get("message") or "-")[:60]]
            for n in status["nodes"]]
    if rows:
        lines += table(["NODE", "HOST", "PID", "UP", "PAGES", "ITEMS", "PAGES/MIN", "INFLIGHT",
                        "BEAT", "LAST ERROR"], rows)
    else:
        lines.append("no live nodes")
    by_queue = status["top_domains_by_queue"]
    by_pace = status["top_domains_by_pace"]
    if by_queue or by_pace:
        lines.append("")
        pairs = [[by_queue[i]["domain"] if i < len(by_queue) else "",
                  by_queue[i]["queued"] if i < len(by_queue) else "",
                  by_pace[i]["domain"] if i < len(by_pace) else "",
                  f"{by_pace[i]['pages_per_min']:.1f}" if i < len(by_pace) else ""]
                 for i in range(max(len(by_queue), len(by_pace)))]
        lines += table(["TOP DOMAINS BY QUEUE", "QUEUED", "TOP DOMAINS BY PACE", "PAGES/MIN"], pairs)
    return "\n".join(lines)
