"""What a batch of buffered items becomes in MongoDB, and what a failed write means for each.

Functions over :class:`Entry` (no I/O, no reactor):

* :func:`entry_for` buffers an item, unless :func:`unstorable` says it can never
  be stored (no unique key, not BSON, over the document size limit);
* :func:`group` and :func:`writes` turn a batch into one write per unique key,
  merging the items that share a key in arrival order (later fields win), which
  stores exactly what writing them one after the other would. A key is first
  inserted (several times cheaper for the server than an upsert); a key that
  turns out to be stored already (a page fetched again after a crash, or a
  recrawl) is retried as a ``$set`` upsert, so the result is the same as
  upserting every time;
* :func:`sort_out` splits a partly failed bulk write into stored, to-retry and
  refused groups: duplicate keys and transient server states are retried,
  anything else is refused for good;
* :func:`resolve`, :func:`refuse` and :func:`fail` settle an entry's Deferred at
  most once (a cancelled one is left alone).
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from typing import Any

import bson
from bson.errors import BSONError
from itemadapter import ItemAdapter
from pymongo import InsertOne, UpdateOne
from pymongo.errors import BulkWriteError
from scrapy.exceptions import DropItem
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from distscraper.frontier.tracker import NotDurable

#: The largest document MongoDB stores.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
#: Duplicate-key errors: the key is already stored (an insert), or an upsert raced another one.
DUPLICATE_KEY_CODES = frozenset({11000, 11001})
#: Attempts an item gets while its writes keep hitting duplicate-key errors.
MAX_CONFLICT_ATTEMPTS = 5
#: Per-operation error codes of transient server states, retried like an outage.
TRANSIENT_CODES = frozenset({6, 7, 24, 50, 64, 89, 91, 112, 189, 262, 9001, 10107, 11600,
                             11602, 13435, 13436})

Group = list["Entry"]


class ItemNotStored(NotDurable):
    """A closing crawl gave up on the item because MongoDB stayed unreachable.

    Its request must not be acknowledged: it is crawled again.
    """

    def __init__(self, message: str = "MongoDB unreachable while closing: item not stored",
                 ) -> None:
        super().__init__(message, log_level="DEBUG")  # one ERROR line covers all of them


@dataclass(eq=False)
class Entry:
    """One buffered item; ``deferred`` fires once it is stored (or given up)."""

    item: Any
    key: Any
    doc: dict[str, Any]
    added: float
    deferred: Deferred[Any] = field(default_factory=Deferred)
    conflicts: int = 0  # duplicate-key errors so far; after the first, its key is upserted


def entry_for(item: Any, unique_key: str) -> Entry | DropItem:
    """The buffer entry of *item*, or the DropItem to fail it with if it can never be stored."""
    doc = {name: _plain(value) for name, value in ItemAdapter(item).items()}
    key = doc.get(unique_key)
    problem = unstorable(doc, key, unique_key)
    if problem is not None:
        return DropItem(f"Item not stored in MongoDB: {problem}")
    return Entry(item, key, doc, time.monotonic())


#: Values stored as they are (ItemAdapter.asdict would ask every adapter about each).
_SCALARS = (str, int, float, bool, type(None), bytes, datetime.datetime)


def _plain(value: Any) -> Any:
    """*value* with the items nested in it turned into dicts, as ItemAdapter.asdict does."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if ItemAdapter.is_item(value):
        return {k: _plain(v) for k, v in ItemAdapter(value).items()}
    return value


def unstorable(doc: dict[str, Any], key: Any, unique_key: str) -> str | None:
    """Why *doc* can never be stored, or None."""
    if key is None or key == "":
        return f"it has no {unique_key!r} field (MONGO_UNIQUE_KEY) to upsert on"
    try:
        size = len(bson.encode(doc))
    except (BSONError, OverflowError, TypeError, ValueError) as exc:
        return f"it cannot be encoded as BSON ({exc})"
    if size > MAX_DOCUMENT_BYTES:
        return f"it is {size} bytes as BSON, over MongoDB's limit of {MAX_DOCUMENT_BYTES}"
    return None


def group(entries: list[Entry]) -> list[Group]:
    """Entries grouped by unique key, in order of first appearance."""
    groups: dict[Any, Group] = {}
    for entry in entries:
        groups.setdefault(_hashable(entry.key), []).append(entry)
    return list(groups.values())


def writes(groups: list[Group], unique_key: str) -> list[InsertOne[Any] | UpdateOne]:
    """One write per group, of its items' fields merged in arrival order.

    An insert while no item of the group has met its key already stored, else a
    ``$set`` upsert.
    """
    return [UpdateOne({unique_key: g[-1].key}, {"$set": _merged(g)}, upsert=True)
            if any(e.conflicts for e in g) else InsertOne(dict(_merged(g)))  # insert adds _id
            for g in groups]


def sort_out(details: dict[str, Any], groups: list[Group]
             ) -> tuple[list[Entry], list[Entry], list[tuple[Group, dict[str, Any]]]]:
    """``(stored, retry, refused)`` of a partly failed bulk write of *groups*.

    A group without an error of its own is stored, unless the write concern was
    not met (then it is retried). ``refused`` pairs each group with its error.
    """
    errors = {e["index"]: e for e in details.get("writeErrors", [])}
    unconfirmed = bool(details.get("writeConcernErrors"))
    stored: list[Entry] = []
    retry: list[Entry] = []
    refused: list[tuple[Group, dict[str, Any]]] = []
    for index, grp in enumerate(groups):
        error = errors.get(index)
        if error is None:
            (retry if unconfirmed else stored).extend(grp)
        elif _retryable(error, grp):
            retry.extend(grp)
        else:
            refused.append((grp, error))
    return stored, retry, refused


def only_conflicts(exc: BaseException) -> bool:
    """True for a bulk write that failed only on keys already stored (or raced by others)."""
    return (isinstance(exc, BulkWriteError) and not exc.details.get("writeConcernErrors")
            and all(e.get("code") in DUPLICATE_KEY_CODES
                    for e in exc.details.get("writeErrors", [])))


def resolve(entries: list[Entry]) -> None:
    """Fire each entry's Deferred with its item: it is stored."""
    for entry in entries:
        if not entry.deferred.called:  # it may have been cancelled
            entry.deferred.callback(entry.item)


def refuse(grp: Group, error: dict[str, Any]) -> None:
    """Drop every item of *grp*: MongoDB refused their upsert with *error* for good."""
    reason = f"MongoDB refused it (code {error.get('code')}: {error.get('errmsg')})"
    for entry in grp:
        fail(entry, DropItem(f"Item not stored in MongoDB: {reason}", log_level="ERROR"))


def fail(entry: Entry, exc: Exception) -> None:
    """Fail *entry*'s Deferred with *exc*, unless it already fired (or was cancelled)."""
    if not entry.deferred.called:
        entry.deferred.errback(Failure(exc))


def _retryable(error: dict[str, Any], grp: Group) -> bool:
    code = error.get("code")
    if code in DUPLICATE_KEY_CODES:  # already stored, or a concurrent upsert won: upsert
        for entry in grp:
            entry.conflicts += 1
        return max(e.conflicts for e in grp) < MAX_CONFLICT_ATTEMPTS
    return code in TRANSIENT_CODES


def _merged(grp: Group) -> dict[str, Any]:
    if len(grp) == 1:
        return grp[0].doc
    doc: dict[str, Any] = {}
    for entry in grp:
        doc.update(entry.doc)
    return doc


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return ("<unhashable>", repr(value))
    return value
