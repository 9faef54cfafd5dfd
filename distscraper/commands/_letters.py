"""What ``scrapy dead``, ``scrapy quarantine`` and ``scrapy invalid`` operate on.

* :class:`DeadLetters`: ``<prefix>:dead``, a HASH fingerprint -> JSON record
  ``{url, error, attempts, first_attempt, last_attempt, node, payload}``.
  Requeue and purge are compare-and-delete in Lua: an entry is removed only if
  its record is still the one that was read, and a requeued one is removed from
  the hash and put in its domain queue (bypassing the dupefilter, attempts
  reset) in the same atomic step, with its domain scheduled as exchange.lua
  does. An entry is therefore never lost nor queued twice.
* :class:`LetterList`: ``<prefix>:quarantine`` (JSON ``{entry, reason, at}``)
  and ``<prefix>:start_urls:invalid`` (JSON ``{seed, reason, at}``), LISTs.

No class here is a Scrapy command (Scrapy would list this module as one).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis

from distscraper.frontier import codec
from distscraper.frontier.keys import FrontierKeys
from distscraper.frontier.store import FrontierStore

LUA_BATCH = 200

#: ARGV: prefix, now_ms, mode ("requeue" | "purge"), then per entry:
#: fingerprint, expected record, payload, domain, queue score.
TAKE_DEAD = """
local P, now, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local TWO32 = 4294967296
local K_DEAD, K_READY, K_WAIT = P .. 'dead', P .. 'domains:ready', P .. 'domains:wait'
local function band(score) return math.floor(score / TWO32) end
local function schedule_domain(d, score)
  local rs = redis.call('ZSCORE', K_READY, d)
  if rs then
    if band(score) < band(tonumber(rs)) then
      local seq = redis.call('INCR', P .. 'seq') % TWO32
      redis.call('ZADD', K_READY, band(score) * TWO32 + seq, d)
    end
  else
    local t = tonumber(redis.call('HGET', P .. 'throttle', d .. '|next')) or 0
    if t < now then t = now end
    redis.call('ZADD', K_WAIT, 'NX', t, d)
  end
end
local done = 0
for i = 4, #ARGV, 5 do
  local fp, expected = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', K_DEAD, fp) == expected and redis.call('HDEL', K_DEAD, fp) == 1 then
    if mode == 'requeue' then
      local payload, d, score = ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4])
      redis.call('ZADD', P .. 'requests:' .. d, score, payload)
      schedule_domain(d, score)
    end
    done = done + 1
  end
end
if done > 0 then redis.call('HINCRBY', P .. 'stats', 'dead_' .. mode .. 'd', done) end
return done
"""


@dataclass(frozen=True)
class Letter:
    """One stored entry: its id (fingerprint or list position), the text --pattern searches, its record."""

    id: str
    text: str
    record: dict[str, Any]
    raw: bytes


def _record(raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except ValueError:
        obj = None
    return obj if isinstance(obj, dict) else {"unparsable": raw.decode("utf-8", "replace")}


def fresh_payload(record: dict[str, Any]) -> tuple[str, str, int]:
    """The dead request's payload with its attempts reset, its domain and queue score."""
    obj = codec.loads(record.get("payload") or "")
    obj.pop("n", None)
    obj.pop("t0", None)
    payload = json.dumps(obj, separators=(",", ":"), sort_keys=True)
    return payload, obj["d"], FrontierStore.queue_score(int(obj.get("p", 0)))


class DeadLetters:
    """``<prefix>:dead`` (see the module docstring)."""

    def __init__(self, server: redis.Redis, keys: FrontierKeys) -> None:
        self.server = server
        self.key = keys.dead
        self.prefix = keys.prefix + ":"
        self._take = server.register_script(TAKE_DEAD)

    def entries(self) -> list[Letter]:
        """Every dead letter, the most recent failure first."""
        out = []
        for fp, raw in self.server.hscan_iter(self.key, count=500):
            record = _record(raw)
            out.append(Letter(fp.decode(), str(record.get("url", "")), record, raw))
        out.sort(key=lambda letter: -float(letter.record.get("last_attempt") or 0))
        return out

    def requeue(self, letters: list[Letter]) -> dict[str, int]:
        """Move *letters* to their domain queues; counts requeued / changed meanwhile / undecodable."""
        rows: list[Any] = []
        undecodable = 0
        for letter in letters:
            try:
                payload, domain, score = fresh_payload(letter.record)
            except (codec.PayloadError, TypeError, ValueError):
                undecodable += 1
                continue
            rows.append((letter.id, letter.raw, payload, domain, score))
        done = self._run("requeue", rows)
        return {"requeued": done, "changed": len(rows) - done, "undecodable": undecodable}

    def purge(self, letters: list[Letter]) -> int:
        return self._run("purge", [(x.id, x.raw, "", "", 0) for x in letters])

    def purge_all(self) -> int:
        """Delete the whole hash; returns how many entries it had (one MULTI)."""
        pipe = self.server.pipeline(transaction=True)
        pipe.hlen(self.key)
        pipe.delete(self.key)
        return int(pipe.execute()[0])

    def _run(self, mode: str, rows: list[Any]) -> int:
        done = 0
        for start in range(0, len(rows), LUA_BATCH):
            argv: list[Any] = [self.prefix, int(time.time() * 1000), mode]
            for row in rows[start:start + LUA_BATCH]:
                argv.extend(row)
            done += int(self._take(args=argv))
        return done


class LetterList:
    """A LIST of JSON records (quarantine, invalid seeds); *field* is what --pattern searches."""

    def __init__(self, server: redis.Redis, key: str, field: str) -> None:
        self.server = server
        self.key = key
        self.field = field

    def entries(self) -> list[Letter]:
        """Every entry, newest first (they are LPUSHed)."""
        out = []
        for i, raw in enumerate(self.server.lrange(self.key, 0, -1)):
            record = _record(raw)
            text = record.get(self.field, record.get("unparsable", ""))
            out.append(Letter(str(i), text if isinstance(text, str) else json.dumps(text), record, raw))
        return out

    def purge(self, letters: list[Letter]) -> int:
        """Remove one stored copy per letter (LREM by value: never another entry)."""
        pipe = self.server.pipeline(transaction=True)
        for letter in letters:
            pipe.lrem(self.key, 1, letter.raw)
        return sum(int(n) for n in pipe.execute())

    def purge_all(self) -> int:
        """Delete the whole list; returns how many entries it had (one MULTI)."""
        pipe = self.server.pipeline(transaction=True)
        pipe.llen(self.key)
        pipe.delete(self.key)
        return int(pipe.execute()[0])
