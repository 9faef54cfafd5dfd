"""The requests one worker holds, and how each of them ends.

A :class:`LeaseBook` records every request this worker has leased. A lease
ends exactly once, by writing one outcome to the worker's :class:`Outbox`:
``ack`` (outputs durable), ``return`` (back to the queue), ``retry``, ``dead``
or ``quarantine``. The ack of a response waits until the spider's output is
exhausted *and* every item it produced has left the item pipelines.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

from scrapy import Request

from distscraper.frontier.store import Outbox

LEASE_META = "_ds_lease"  # request.meta key holding the local lease id; never sent to Redis


@dataclass
class Lease:
    """A request this worker has popped and not yet finished."""

    payload: bytes
    domain: str
    token: bytes  # holds its cluster-wide download slot (b"" when there is no per-domain limit)
    items: int = 0
    outputs_done: bool = False
    slot_released: bool = False
    taken_at: float = field(default_factory=time.monotonic)


class LeaseBook:
    """Local leases, each ending with exactly one outcome in *outbox*."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self._leases: dict[int, Lease] = {}
        self._ids = itertools.count(1)
        #: domain -> cluster-wide slots this worker's leases hold (the exchange script
        #: keeps each worker to its share of a domain's slots).
        self.slots_held: Counter[str] = Counter()
        #: leases whose response is parsed and whose items are being stored
        self.storing = 0

    def __len__(self) -> int:
        return len(self._leases)

    def payloads(self) -> list[bytes]:
        return [lease.payload for lease in self._leases.values()]

    def add(self, request: Request, payload: bytes, domain: str, token: bytes) -> None:
        lease_id = next(self._ids)
        request.meta[LEASE_META] = lease_id
        self._leases[lease_id] = Lease(payload, domain, token)
        if token:
            self.slots_held[domain] += 1

    def of(self, request: Request) -> tuple[int, Lease] | tuple[None, None]:
        lease_id = request.meta.get(LEASE_META)
        lease = self._leases.get(lease_id) if lease_id is not None else None
        return (lease_id, lease) if lease is not None else (None, None)

    def forget_stale(self, older_than: float) -> Iterator[Lease]:
        """Stop holding leases taken before *older_than*: they expire and another node redoes them."""
        for lease_id in [i for i, lease in self._leases.items() if lease.taken_at < older_than]:
            lease = self._take(lease_id)
            assert lease is not None
            if lease.token and not lease.slot_released:  # its slot frees when the lease expires
                lease.slot_released = True
                self._slot_gone(lease.domain)
            yield lease

    # -- progress of a leased response ---------------------------------------------
    def release_slot(self, request: Request) -> None:
        """The request left the downloader: its cluster-wide domain slot is free."""
        _, lease = self.of(request)
        if lease is not None:
            self._release_slot(lease)

    def _release_slot(self, lease: Lease) -> None:
        if lease.token and not lease.slot_released:
            lease.slot_released = True
            self.outbox.slot_releases.append((lease.domain, lease.token))
            self._slot_gone(lease.domain)

    def _slot_gone(self, domain: str) -> None:
        self.slots_held[domain] -= 1
        if self.slots_held[domain] <= 0:
            del self.slots_held[domain]

    def item_started(self, request: Request) -> None:
        _, lease = self.of(request)
        if lease is not None:
            lease.items += 1

    def item_finished(self, request: Request) -> None:
        lease_id, lease = self.of(request)
        if lease is not None:
            lease.items -= 1
            self._maybe_ack(lease_id, lease)

    def outputs_done(self, request: Request) -> None:
        lease_id, lease = self.of(request)
        if lease is not None and not lease.outputs_done:
            lease.outputs_done = True
            self.storing += 1
            self._maybe_ack(lease_id, lease)

    def _maybe_ack(self, lease_id: int, lease: Lease) -> None:
        if lease.outputs_done and lease.items <= 0:
            self.finalize(lease_id, "ack")

    # -- outcomes --------------------------------------------------------------------------
    def end(self, request: Request, how: str, **info: Any) -> bool:
        """End *request*'s lease (see :meth:`finalize`); False if it holds none."""
        lease_id, _ = self.of(request)
        if lease_id is None:
            return False
        self.finalize(lease_id, how, **info)
        return True

    def finalize(self, lease_id: int, how: str, **info: Any) -> None:
        """End a lease: ``ack``, ``return``, ``retry`` (needs new_payload, due_ms),
        ``dead`` (needs fingerprint, record) or ``quarantine`` (needs reason)."""
        lease = self._take(lease_id)
        if lease is None:
            return
        self._release_slot(lease)
        box = self.outbox
        if how == "ack":
            box.acks.append((lease.payload, lease.domain))
        elif how == "return":
            box.returns.append(lease.payload)
        elif how == "retry":
            box.retries.append((lease.payload, info["new_payload"], info["due_ms"], lease.domain))
        elif how == "dead":
            box.dead.append((lease.payload, lease.domain, info["fingerprint"], info["record"]))
        elif how == "quarantine":
            box.quarantine.append((lease.payload, info["reason"]))
        else:
            raise ValueError(f"unknown lease end {how!r}")

    def _take(self, lease_id: int) -> Lease | None:
        lease = self._leases.pop(lease_id, None)
        if lease is not None and lease.outputs_done:
            self.storing -= 1
        return lease

    def return_all(self) -> None:
        for lease_id in list(self._leases):
            self.finalize(lease_id, "return")
