"""The queue mark in Redis: one key per Kyma with an expiry (``RECONCILE_QUEUED_TTL``), claimed in
one round trip; the listener's concurrent claims share one pipelined round trip (:mod:`..batching`).
Key layout (``RECONCILE_FLAGS_PREFIX``): ``<prefix>:reconcile-queued:<id>`` the mark ("<eta> <not
before>" in Unix seconds, then one line per change), ``reconcile-spaced:<id>`` the spacing hint,
``reconcile-busy:<id>`` the busy flag, ``reconcile-urgent:<id>`` the second mark."""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Sequence

import hiredis
import redis
from django.utils import timezone

from fleet.queue.batching import GroupCommit
from fleet.queue.changes import MAX_CHANGES

from .base import BUSY_FOR, Started, clock_skew, from_stamp, mark_lines, mark_ttl, to_stamp
from .redis_scripts import CLAIM_FULL, CLAIM_ONE, REFRESH, RELEASE


class RedisFlags:
    """The mark as a Redis key that expires by itself after ``RECONCILE_QUEUED_TTL``."""

    def __init__(self, url: str, prefix: str) -> None:

        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.prefix = prefix
        self._claim_one = self.client.register_script(CLAIM_ONE)
        self._release = self.client.register_script(RELEASE)
        self._claim_full = self.client.register_script(CLAIM_FULL)
        self._refresh = self.client.register_script(REFRESH)
        # Concurrent claims (the listener's threads) share one pipelined round trip, on a
        # connection of their own: only the batch's leader uses it, one batch at a time.
        self._claims: GroupCommit[list, object] = GroupCommit(self._claim_batch)
        self._claim_connection: tuple[int, redis.connection.AbstractConnection] | None = None

    def _claim_batch(self, batch: Sequence[list]) -> list:
        """Run the claim script once per item in one pipeline (EVALSHA; loaded again if the
        server lost its scripts). An error answer goes to its own caller only."""
        answers = self._evalsha_all(batch)
        if any(isinstance(answer, redis.exceptions.NoScriptError) for answer in answers):
            self.client.script_load(CLAIM_ONE)
            answers = self._evalsha_all(batch)
        return answers

    def _connection(self) -> redis.connection.AbstractConnection:
        """The claims' own connection (made by the client's pool, so with its URL, TLS and
        credentials; a new one in a forked child). Taking a pooled connection per batch cost as
        much CPU as the round trip itself (bench/listener.py row (a))."""
        pid = os.getpid()
        if self._claim_connection is None or self._claim_connection[0] != pid:
            self._claim_connection = (pid, self.client.connection_pool.make_connection())
        return self._claim_connection[1]

    def _evalsha_all(self, batch: Sequence[list]) -> list:
        """The pipeline without the client's per-command machinery: the commands go out in one
        write and their answers are read in order. A Redis error answer stays in its item's
        place; a connection error fails the whole batch (the connection is dropped and made again
        by the next batch; nothing is retried, since a claim that ran but whose answer was lost
        must not run twice)."""
        conn = self._connection()
        sha = self._claim_one.sha
        # hiredis packs the same bytes as the connection's packer, without its per-argument
        # Python checks: 1.7 us a claim instead of 4.3 (the listener claims per WatchEvent).
        packed = b"".join([hiredis.pack_command(("EVALSHA", sha, 3, *args)) for args in batch])
        try:
            conn.send_packed_command([packed])
            answers: list = []
            for _ in batch:
                try:
                    answers.append(conn.read_response())
                except redis.exceptions.ResponseError as exc:
                    answers.append(exc)
        except BaseException:
            conn.disconnect()
            raise
        return answers

    def key(self, kyma_id: int) -> str:
        return f"{self.prefix}:reconcile-queued:{kyma_id}"

    def spaced_key(self, kyma_id: int) -> str:
        return f"{self.prefix}:reconcile-spaced:{kyma_id}"

    def claim(
        self,
        kyma_ids: Sequence[int],
        now: dt.datetime,
        eta: dt.datetime,
        changes: Sequence[str] = (),
        *,
        full: bool = False,
    ) -> list[int]:
        ttl = int(mark_ttl().total_seconds())
        value = "\n".join([f"{to_stamp(eta)} 0", *mark_lines(changes, full=full)])
        with self.client.pipeline(transaction=False) as pipe:
            for kyma_id in kyma_ids:
                if full:  # atomic: a task that starts meanwhile takes the mark with FULL, or none
                    self._claim_full(keys=[self.key(kyma_id)], args=[value, ttl], client=pipe)
                else:
                    pipe.set(self.key(kyma_id), value, nx=True, ex=ttl)
            results = pipe.execute()
        return [kyma_id for kyma_id, won in zip(kyma_ids, results, strict=True) if won]

    def claim_one(
        self,
        kyma_id: int,
        now: dt.datetime,
        eta: dt.datetime,
        need: dt.datetime | None,
        changes: Sequence[str] = (),
        fallback: dt.datetime | None = None,
    ) -> tuple[bool, dt.datetime]:
        claimed, found = self._claims.call(
            [
                self.key(kyma_id),
                self.spaced_key(kyma_id),
                self.busy_key(kyma_id),
                to_stamp(eta),
                to_stamp(need) if need is not None else "0",
                int(mark_ttl().total_seconds()),
                clock_skew().total_seconds(),
                to_stamp(now),
                "\n".join(changes),
                MAX_CHANGES,
                to_stamp(fallback) if fallback is not None else "0",
                round(BUSY_FOR * 1000),
            ]
        )
        return bool(claimed), from_stamp(found)

    def urgent_key(self, kyma_id: int) -> str:
        return f"{self.prefix}:reconcile-urgent:{kyma_id}"

    def claim_urgent(self, kyma_ids: Sequence[int], now: dt.datetime) -> list[int]:
        ttl = int(mark_ttl().total_seconds())
        with self.client.pipeline(transaction=False) as pipe:
            for kyma_id in kyma_ids:
                pipe.set(self.urgent_key(kyma_id), to_stamp(now), nx=True, ex=ttl)
            results = pipe.execute()
        return [kyma_id for kyma_id, won in zip(kyma_ids, results, strict=True) if won]

    def started_urgent(self, kyma_id: int) -> None:
        self.client.delete(self.urgent_key(kyma_id))

    def busy_key(self, kyma_id: int) -> str:
        return f"{self.prefix}:reconcile-busy:{kyma_id}"

    def space(self, kyma_id: int, until: dt.datetime | None, *, if_free: bool = False) -> bool:
        if until is None:
            return bool(self.client.delete(self.spaced_key(kyma_id)))
        keep = math.ceil((until - timezone.now()).total_seconds() * 1000)
        return keep > 0 and bool(
            self.client.set(self.spaced_key(kyma_id), to_stamp(until), px=keep, nx=if_free)
        )

    def busy(self, kyma_ids: Sequence[int]) -> set[int]:
        if not kyma_ids:
            return set()
        with self.client.pipeline(transaction=False) as pipe:
            for kyma_id in kyma_ids:
                pipe.exists(self.busy_key(kyma_id))
            results = pipe.execute()
        return {kyma_id for kyma_id, spaced in zip(kyma_ids, results, strict=True) if spaced}

    def release(self, kyma_ids: Sequence[int], eta: dt.datetime) -> None:
        for kyma_id in kyma_ids:
            self._release(keys=[self.key(kyma_id)], args=[to_stamp(eta)])

    def started(self, kyma_id: int, *, space_until: dt.datetime | None = None) -> Started:
        keep = math.ceil((space_until - timezone.now()).total_seconds() * 1000) if space_until else 0
        if keep > 0:  # one round trip: the mark goes, then the spacing holds
            with self.client.pipeline(transaction=False) as pipe:
                pipe.getdel(self.key(kyma_id))
                pipe.set(self.spaced_key(kyma_id), to_stamp(space_until), px=keep, nx=True)
                value, spaced = pipe.execute()
        else:
            value, spaced = self.client.getdel(self.key(kyma_id)), False
        if not value:
            return Started(spaced=bool(spaced))
        head, *changes = value.decode().split("\n")
        _, _, not_before = head.partition(" ")
        moment = from_stamp(not_before) if not_before and float(not_before) > 0 else None
        return Started(moment, tuple(line for line in changes if line), found=True, spaced=bool(spaced))

    def queued(self, kyma_ids: Sequence[int]) -> set[int]:
        with self.client.pipeline(transaction=False) as pipe:
            for kyma_id in kyma_ids:
                pipe.exists(self.key(kyma_id))
            results = pipe.execute()
        return {kyma_id for kyma_id, found in zip(kyma_ids, results, strict=True) if found}

    def queued_count(self) -> int:
        return sum(1 for _ in self.client.scan_iter(match=self.key("*"), count=1000))

    def overdue(self, before: dt.datetime, limit: int) -> list[tuple[int, str]]:
        keys = list(self.client.scan_iter(match=self.key("*"), count=1000))
        found: list[tuple[int, str]] = []
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            for key, value in zip(chunk, self.client.mget(chunk), strict=True):
                if not value:
                    continue
                eta = value.decode().split("\n", 1)[0].partition(" ")[0]
                if float(eta) < before.timestamp():
                    found.append((int(key.decode().rpartition(":")[2]), eta))
                    if len(found) >= limit:
                        return found
        return found

    def refresh(self, kyma_id: int, eta: str, now: dt.datetime) -> bool:
        ttl = int(mark_ttl().total_seconds())
        return bool(self._refresh(keys=[self.key(kyma_id)], args=[eta, to_stamp(now), ttl]))
