"""Where the "a reconcile of this Kyma is queued and has not started" mark lives.

The mark is checked for every WatchEvent, so it must be cheap: with a Redis broker it lives in
Redis (one key with an expiry, one round trip, no load on PostgreSQL); otherwise it is the
``Kyma.reconcile_queued_at``/``reconcile_not_before`` columns (and ``reconcile_spaced_until``),
claimed with a read and a conditional ``UPDATE ... RETURNING``. Both give the same guarantees (see
:mod:`fleet.queue.requests`): one claimer wins, a mark older than
``RECONCILE_QUEUED_TTL`` counts as lost and can be claimed again, and a starting task clears the
mark before it reads any state.

A mark holds two times: the *ETA* of its task (it cannot start earlier: the broker holds it until
then) and *not before*, raised by requests that need the task to start later than its ETA (an
event that arrives just before the task is due: the runtime stores that change a moment after
the event). The starting task gets *not before* back and waits until then before reading.

A mark also carries the *changes* the events it covers reported (:mod:`.changes`; our runtime
watcher sends them): the union of them, so the starting task can check that the runtime stored
every one before it reads. A change added after the task started goes with the next mark.

And it says how much the task must read (:data:`FULL`): a reconcile whose requests all said what
changed (events that named their change, a module manager's SyncResource) need only read that;
any other request (an event that did not say, a user's "reconcile now", a job) asks the task to
read everything (see :mod:`reconciler.engine`). Coalesced requests keep the widest ask.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import redis
from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from fleet.models import Kyma

from .batching import GroupCommit
from .changes import MAX_CHANGES

# A Kyma counts as busy (its runtime keeps changing) this long after an event found it spaced or
# found a task of it queued already.
BUSY_FOR = 5.0
# A line of a mark's changes: a request it covers asked for a full reconcile (it said nothing of
# what changed), or a change was left out for want of room (``MAX_CHANGES``). Never left out itself.
FULL = "*"


@dataclass(frozen=True)
class Started:
    """What a starting task learns from the mark it clears: the time before which it must not
    read the runtime, and the changes (encoded) the runtime must have stored before it reads.
    ``found``: there was a mark (a task that finds none was redelivered or retried after it lost
    it, or its mark expired: what it covers is unknown)."""

    not_before: dt.datetime | None = None
    changes: tuple[str, ...] = ()
    found: bool = False

    @property
    def full(self) -> bool:
        """Whether the task must read everything: a request asked for it, or a change was left
        out (past ``MAX_CHANGES``; both say :data:`FULL`), or there was no mark to say."""
        return not self.found or FULL in self.changes


class ReconcileFlags(Protocol):
    def claim(
        self, kyma_ids: Sequence[int], now: dt.datetime, eta: dt.datetime, *, full: bool = False
    ) -> list[int]:
        """Mark the Kymas that are not marked yet, for a task due at ``eta``; return those (the
        caller then publishes). ``full``: the request asks for a full reconcile, so the marks of
        the others (their task has not started) say so too (:data:`FULL`)."""

    def claim_one(
        self,
        kyma_id: int,
        now: dt.datetime,
        eta: dt.datetime,
        need: dt.datetime | None,
        changes: Sequence[str] = (),
        fallback: dt.datetime | None = None,
    ) -> tuple[bool, dt.datetime]:
        """Mark one Kyma in one round trip. Returns (this call claimed it, the earliest time the
        task reads the runtime): a claim is for a task due at ``eta``, or later while the Kyma is
        spaced (:meth:`space`); else the task already queued from now on does not read before
        ``need`` (``None``: no such time) and checks ``changes`` too, and the time returned is the
        later of its ETA and its "not before". Past ``MAX_CHANGES`` on one mark, further changes
        ask for ``fallback`` as "not before" instead, and the mark says :data:`FULL` (which
        always finds room). An ETA set on another host counts only ``LISTENER_CLOCK_SKEW``
        earlier (that host's clock may run ahead)."""

    def space(self, kyma_id: int, until: dt.datetime | None, *, if_free: bool = False) -> bool:
        """A reconcile starts and the next one must wait for ``RECONCILE_MIN_SPACING``: a claim
        until then is for a task due then, published with that countdown at once (the task
        would otherwise start, find it is too soon and retry). Only a hint: the task checks the
        spacing itself. ``None`` clears it; ``if_free`` sets it only when none holds now.
        Returns whether it was set."""

    def busy(self, kyma_ids: Sequence[int]) -> set[int]:
        """Which of these Kymas are *busy*: their runtime kept changing lately (less than
        ``BUSY_FOR`` seconds ago an event found the Kyma spaced, or a task of it queued already;
        on the database: a reconcile of it was spaced)."""

    def release(self, kyma_ids: Sequence[int], eta: dt.datetime) -> None:
        """Undo a claim made for ``eta`` (its publish failed)."""

    def claim_urgent(self, kyma_ids: Sequence[int], now: dt.datetime) -> list[int]:
        """The second mark: an urgent task is queued beside the one the first mark says (which
        may be spaced). Marks the Kymas without it; returns those. Same TTL."""

    def started_urgent(self, kyma_id: int) -> None:
        """An urgent task starts: later urgent requests must queue a new one."""

    def started(self, kyma_id: int) -> Started:
        """A task starts: later requests must queue a new one. Returns the time before which the
        task must not read the runtime, if requests asked for one, and the changes to check."""

    def queued(self, kyma_ids: Sequence[int]) -> set[int]:
        """Which of these Kymas are marked now."""

    def queued_count(self) -> int: ...

    def overdue(self, before: dt.datetime, limit: int) -> list[tuple[int, str]]:
        """Marks whose task was due before ``before`` and has not started: (Kyma, the mark's ETA
        as stored, to re-claim exactly that mark with :meth:`refresh`)."""

    def refresh(self, kyma_id: int, eta: str, now: dt.datetime) -> bool:
        """Move an overdue mark's ETA (as :meth:`overdue` returned it) to ``now`` and its expiry
        to a full TTL from now, keeping what it says; False when it moved on meanwhile (its task
        started, or another refresh took it)."""


def _mark_lines(changes: Sequence[str], *, full: bool) -> list[str]:
    """The lines a new mark carries: the changes, and FULL once when the request is full."""
    return [*changes, FULL] if full and FULL not in changes else list(changes)


def _ttl() -> dt.timedelta:
    return dt.timedelta(seconds=settings.RECONCILE_QUEUED_TTL)


def _skew() -> dt.timedelta:
    return dt.timedelta(seconds=settings.LISTENER_CLOCK_SKEW)


class DatabaseFlags:
    """The mark as two columns: for SQLite and deployments without Redis."""

    table = Kyma._meta.db_table

    def claim(
        self,
        kyma_ids: Sequence[int],
        now: dt.datetime,
        eta: dt.datetime,
        changes: Sequence[str] = (),
        *,
        full: bool = False,
    ) -> list[int]:
        lines = _mark_lines(changes, full=full)
        claimed = self._claim_free(kyma_ids, now, eta, lines)
        rest = [kyma_id for kyma_id in kyma_ids if kyma_id not in set(claimed)] if full else []
        # A marked Kyma's task may start between the two statements: its mark is gone then, and
        # this request claims a new one. (Bounded only against a database that misbehaves.)
        for _ in range(100):
            if not rest:
                break
            marked = self._mark_full(rest, now)
            won = self._claim_free([kyma_id for kyma_id in rest if kyma_id not in marked], now, eta, lines)
            claimed += won
            left = [kyma_id for kyma_id in rest if kyma_id not in marked and kyma_id not in won]
            if left == rest:  # no progress: Kymas that are gone have nothing to mark
                left = list(Kyma.objects.filter(id__in=left).values_list("id", flat=True))
            rest = left
        return claimed

    def _mark_full(self, kyma_ids: Sequence[int], now: dt.datetime) -> set[int]:
        """Add :data:`FULL` to the live marks of these Kymas; returns the Kymas whose mark says it."""
        adapt = connection.ops.adapt_datetimefield_value
        marks = ", ".join(["%s"] * len(kyma_ids))
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {self.table} SET reconcile_changes = CASE "
                "WHEN (%s || reconcile_changes || %s) LIKE %s THEN reconcile_changes "
                "WHEN reconcile_changes = '' THEN %s ELSE reconcile_changes || %s END "
                f"WHERE id IN ({marks}) AND reconcile_queued_at >= %s RETURNING id",
                ["\n", "\n", f"%\n{FULL}\n%", FULL, f"\n{FULL}", *kyma_ids, adapt(now - _ttl())],
            )
            return {row[0] for row in cursor.fetchall()}

    def _claim_free(
        self, kyma_ids: Sequence[int], now: dt.datetime, eta: dt.datetime, changes: Sequence[str]
    ) -> list[int]:
        # First a plain read finds the Kymas whose mark looks free (no lock, no write: the common
        # case in a burst); skipping a marked Kyma is safe because its task has not started yet.
        # Then one conditional UPDATE ... RETURNING decides races between concurrent claimers.
        if not kyma_ids:
            return []
        adapt = connection.ops.adapt_datetimefield_value  # compare and store exactly as the ORM would
        stale = adapt(now - _ttl())
        free = "(reconcile_queued_at IS NULL OR reconcile_queued_at < %s)"
        with connection.cursor() as cursor:
            marks = ", ".join(["%s"] * len(kyma_ids))
            cursor.execute(
                f"SELECT id FROM {self.table} WHERE id IN ({marks}) AND {free}", [*kyma_ids, stale]
            )
            candidates = [row[0] for row in cursor.fetchall()]
            if not candidates:
                return []
            marks = ", ".join(["%s"] * len(candidates))
            cursor.execute(
                f"UPDATE {self.table} SET reconcile_queued_at = %s, reconcile_not_before = NULL, "
                f"reconcile_changes = %s WHERE id IN ({marks}) AND {free} RETURNING id",
                [adapt(eta), "\n".join(changes), *candidates, stale],
            )
            return [row[0] for row in cursor.fetchall()]

    def claim_one(
        self,
        kyma_id: int,
        now: dt.datetime,
        eta: dt.datetime,
        need: dt.datetime | None,
        changes: Sequence[str] = (),
        fallback: dt.datetime | None = None,
    ) -> tuple[bool, dt.datetime]:
        stale = now - _ttl()
        # Each lost race means another request or a starting task moved the mark on: look again.
        # (Bounded only against a database that misbehaves; in practice it ends in a few rounds.)
        for _ in range(100):
            found = (
                Kyma.objects.filter(id=kyma_id)
                .values_list(
                    "reconcile_queued_at",
                    "reconcile_not_before",
                    "reconcile_changes",
                    "reconcile_spaced_until",
                )
                .first()
            )
            if found is None:
                return False, eta  # no such Kyma: nothing to queue
            marked, not_before, held, spaced = found
            if marked is None or marked < stale:
                due = max(eta, spaced) if spaced is not None else eta
                if self.claim([kyma_id], now, due, changes):
                    return True, due
                continue
            known = [line for line in held.split("\n") if line]
            merged, wanted = list(known), need
            for change in changes:
                if change in merged:
                    continue
                if len(merged) < MAX_CHANGES or change == FULL:
                    merged.append(change)
                    continue
                if FULL not in merged:  # a change left out: the task reads everything
                    merged.append(FULL)
                if fallback is not None:
                    wanted = fallback if wanted is None else max(wanted, fallback)
            update: dict = {}
            if merged != known:
                update["reconcile_changes"] = "\n".join(merged)
            if wanted is not None and not (
                marked >= wanted + _skew() or (not_before is not None and not_before >= wanted)
            ):
                update["reconcile_not_before"] = wanted
            start = max(marked, update.get("reconcile_not_before") or not_before or marked)
            if not update:
                return False, start
            raised = Kyma.objects.filter(
                id=kyma_id,
                reconcile_queued_at=marked,
                reconcile_not_before=not_before,
                reconcile_changes=held,
            ).update(**update)
            if raised:
                return False, start
        raise RuntimeError(f"the reconcile mark of Kyma {kyma_id} keeps changing; giving up")

    def claim_urgent(self, kyma_ids: Sequence[int], now: dt.datetime) -> list[int]:
        claimed = []
        for kyma_id in kyma_ids:
            free = Q(reconcile_urgent_at__isnull=True) | Q(reconcile_urgent_at__lt=now - _ttl())
            if Kyma.objects.filter(free, id=kyma_id).update(reconcile_urgent_at=now):
                claimed.append(kyma_id)
        return claimed

    def started_urgent(self, kyma_id: int) -> None:
        Kyma.objects.filter(id=kyma_id).update(reconcile_urgent_at=None)

    def space(self, kyma_id: int, until: dt.datetime | None, *, if_free: bool = False) -> bool:
        rows = Kyma.objects.filter(id=kyma_id)
        if if_free:
            rows = rows.filter(
                Q(reconcile_spaced_until__isnull=True) | Q(reconcile_spaced_until__lt=timezone.now())
            )
        return bool(rows.update(reconcile_spaced_until=until))

    def busy(self, kyma_ids: Sequence[int]) -> set[int]:
        # The column stays after its time (a quiet reconcile clears it): it was spaced lately.
        lately = timezone.now() - dt.timedelta(seconds=BUSY_FOR)
        rows = Kyma.objects.filter(id__in=kyma_ids, reconcile_spaced_until__gt=lately)
        return set(rows.values_list("id", flat=True))

    def release(self, kyma_ids: Sequence[int], eta: dt.datetime) -> None:
        Kyma.objects.filter(id__in=kyma_ids, reconcile_queued_at=eta).update(reconcile_queued_at=None)

    def started(self, kyma_id: int) -> Started:
        # RETURNING gives the row as this UPDATE leaves it: "not before" and the changes as they
        # were when the mark went (a claim resets them; a request adds to them only while the
        # mark is there).
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {self.table} SET reconcile_queued_at = NULL WHERE id = %s "
                "AND reconcile_queued_at IS NOT NULL RETURNING reconcile_not_before, reconcile_changes",
                [kyma_id],
            )
            row = cursor.fetchone()
        if row is None:
            return Started()
        value, held = row
        changes = tuple(line for line in (held or "").split("\n") if line)
        if value is None:
            return Started(None, changes, found=True)
        if isinstance(value, str):  # SQLite hands back the stored text
            value = dt.datetime.fromisoformat(value)
        moment = value if timezone.is_aware(value) else timezone.make_aware(value, dt.UTC)
        return Started(moment, changes, found=True)

    def queued(self, kyma_ids: Sequence[int]) -> set[int]:
        stale = timezone.now() - _ttl()
        return set(
            Kyma.objects.filter(id__in=kyma_ids, reconcile_queued_at__gte=stale).values_list("id", flat=True)
        )

    def queued_count(self) -> int:
        return Kyma.objects.filter(reconcile_queued_at__gte=timezone.now() - _ttl()).count()

    def overdue(self, before: dt.datetime, limit: int) -> list[tuple[int, str]]:
        rows = Kyma.objects.filter(reconcile_queued_at__lt=before).values_list("id", "reconcile_queued_at")[
            :limit
        ]
        return [(kyma_id, _stamp(eta)) for kyma_id, eta in rows]

    def refresh(self, kyma_id: int, eta: str, now: dt.datetime) -> bool:
        return bool(
            Kyma.objects.filter(id=kyma_id, reconcile_queued_at=_moment(eta)).update(reconcile_queued_at=now)
        )


# A mark is "<eta> <not before>" in Unix seconds ("0": none), then one line per change to check
# (or FULL).
# KEYS: the mark, the Kyma's "spaced until" hint, its busy flag. ARGV: eta, need ("0": none), ttl,
# skew, now, changes (one per line, "" for none), most changes per mark, need when there are more
# ("0": none), how long the Kyma counts as busy after this event (ms) when the hint raised its
# claim or a task was queued already.
# Returns {1, eta} when it claimed the mark (the ETA raised to the hint), else {0, the later of the
# mark's ETA and its "not before"}: the queued task reads the runtime no earlier than that.
_CLAIM_ONE = """
local value = redis.call('get', KEYS[1])
if not value then
  local eta = ARGV[1]
  local spaced = redis.call('get', KEYS[2])
  if spaced and tonumber(spaced) > tonumber(eta) then
    eta = spaced
    redis.call('set', KEYS[3], '1', 'PX', ARGV[9])
  end
  local fresh = eta .. ' 0'
  if ARGV[6] ~= '' then fresh = fresh .. '\\n' .. ARGV[6] end
  redis.call('set', KEYS[1], fresh, 'EX', ARGV[3])
  return {1, eta}
end
-- A task is queued already: the runtime changes again before it ran.
redis.call('set', KEYS[3], '1', 'PX', ARGV[9])
local head, tail = value, ''
local newline = string.find(value, '\\n', 1, true)
if newline then
  head = string.sub(value, 1, newline - 1)
  tail = string.sub(value, newline)
end
local need = tonumber(ARGV[2])
local wanted = ARGV[2]
local changed = false
local overflow = false
if ARGV[6] ~= '' then
  local _, count = string.gsub(tail, '\\n', '')
  for change in string.gmatch(ARGV[6], '[^\\n]+') do
    if not string.find(tail .. '\\n', '\\n' .. change .. '\\n', 1, true) then
      if count < tonumber(ARGV[7]) or change == '*' then
        tail = tail .. '\\n' .. change
        count = count + 1
        changed = true
      else
        overflow = true
        if tonumber(ARGV[8]) > need then need, wanted = tonumber(ARGV[8]), ARGV[8] end
      end
    end
  end
  -- A change left out: the task no longer knows every change, so it reads everything.
  if overflow and not string.find(tail .. '\\n', '\\n*\\n', 1, true) then
    tail = tail .. '\\n*'
    changed = true
  end
end
local space = string.find(head, ' ', 1, true)
local eta = '0'
local not_before = '0'
if space then
  eta = string.sub(head, 1, space - 1)
  not_before = string.sub(head, space + 1)
end
if need > 0 and (tonumber(eta) or 0) < need + tonumber(ARGV[4]) and (tonumber(not_before) or 0) < need then
  not_before = wanted
  changed = true
  -- The mark must outlive the wait it now asks for (else the task would start without it), but
  -- never beyond its own TTL counted from its ETA: a mark whose task was lost still expires.
  local keep = math.floor((need - tonumber(ARGV[5]) + 1) * 1000)
  local limit = math.floor(((tonumber(eta) or 0) + tonumber(ARGV[3]) + 1 - tonumber(ARGV[5])) * 1000)
  if keep > limit then keep = limit end
  redis.call('set', KEYS[1], eta .. ' ' .. not_before .. tail, 'KEEPTTL')
  if keep > 0 and redis.call('pttl', KEYS[1]) < keep then redis.call('pexpire', KEYS[1], keep) end
elseif changed then
  redis.call('set', KEYS[1], eta .. ' ' .. not_before .. tail, 'KEEPTTL')
end
if (tonumber(not_before) or 0) > (tonumber(eta) or 0) then return {0, not_before} end
return {0, eta}
"""

# A request that asks for a full reconcile: claims the mark (KEYS[1]) with ARGV[1] (its value,
# which says FULL) for ARGV[2] seconds, or adds FULL to the mark that is there. 1 when it claimed.
_CLAIM_FULL = """
local value = redis.call('get', KEYS[1])
if not value then
  redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
if not string.find(value .. '\\n', '\\n*\\n', 1, true) then
  redis.call('set', KEYS[1], value .. '\\n*', 'KEEPTTL')
end
return 0
"""

# Undo a claim whose publish failed: only the mark of that claim (its ETA), raised or not.
_RELEASE = """
local value = redis.call('get', KEYS[1])
if value and string.sub(value, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  return redis.call('del', KEYS[1])
end
return 0
"""


# Re-claim an overdue mark (KEYS[1]) whose ETA is still ARGV[1]: its ETA becomes ARGV[2] (now),
# "not before" and the changes stay, and it lives ARGV[3] seconds more. 1 when it did.
_REFRESH = """
local value = redis.call('get', KEYS[1])
if not value or string.sub(value, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
redis.call('set', KEYS[1], ARGV[2] .. string.sub(value, #ARGV[1] + 1), 'EX', ARGV[3])
return 1
"""


def _stamp(moment: dt.datetime) -> str:
    return f"{moment.timestamp():.6f}"


def _moment(stamp: bytes | str) -> dt.datetime:
    return dt.datetime.fromtimestamp(float(stamp), dt.UTC)


class RedisFlags:
    """The mark as a Redis key that expires by itself after ``RECONCILE_QUEUED_TTL``."""

    def __init__(self, url: str, prefix: str) -> None:

        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.prefix = prefix
        self._claim_one = self.client.register_script(_CLAIM_ONE)
        self._release = self.client.register_script(_RELEASE)
        self._claim_full = self.client.register_script(_CLAIM_FULL)
        self._refresh = self.client.register_script(_REFRESH)
        # Concurrent claims (the listener's threads) share one pipelined round trip, on a
        # connection of their own: only the batch's leader uses it, one batch at a time.
        self._claims: GroupCommit[list, object] = GroupCommit(self._claim_batch)
        self._claim_connection: tuple[int, redis.connection.AbstractConnection] | None = None

    def _claim_batch(self, batch: Sequence[list]) -> list:
        """Run the claim script once per item in one pipeline (EVALSHA; loaded again if the
        server lost its scripts). An error answer goes to its own caller only."""
        answers = self._evalsha_all(batch)
        if any(isinstance(answer, redis.exceptions.NoScriptError) for answer in answers):
            self.client.script_load(_CLAIM_ONE)
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
        commands = [("EVALSHA", self._claim_one.sha, 3, *args) for args in batch]
        try:
            conn.send_packed_command(conn.pack_commands(commands))
            answers: list = []
            for _ in commands:
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
        ttl = int(_ttl().total_seconds())
        value = "\n".join([f"{_stamp(eta)} 0", *_mark_lines(changes, full=full)])
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
                _stamp(eta),
                _stamp(need) if need is not None else "0",
                int(_ttl().total_seconds()),
                _skew().total_seconds(),
                _stamp(now),
                "\n".join(changes),
                MAX_CHANGES,
                _stamp(fallback) if fallback is not None else "0",
                round(BUSY_FOR * 1000),
            ]
        )
        return bool(claimed), _moment(found)

    def urgent_key(self, kyma_id: int) -> str:
        return f"{self.prefix}:reconcile-urgent:{kyma_id}"

    def claim_urgent(self, kyma_ids: Sequence[int], now: dt.datetime) -> list[int]:
        ttl = int(_ttl().total_seconds())
        with self.client.pipeline(transaction=False) as pipe:
            for kyma_id in kyma_ids:
                pipe.set(self.urgent_key(kyma_id), _stamp(now), nx=True, ex=ttl)
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
            self.client.set(self.spaced_key(kyma_id), _stamp(until), px=keep, nx=if_free)
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
            self._release(keys=[self.key(kyma_id)], args=[_stamp(eta)])

    def started(self, kyma_id: int) -> Started:
        value = self.client.getdel(self.key(kyma_id))
        if not value:
            return Started()
        head, *changes = value.decode().split("\n")
        _, _, not_before = head.partition(" ")
        moment = _moment(not_before) if not_before and float(not_before) > 0 else None
        return Started(moment, tuple(line for line in changes if line), found=True)

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
        ttl = int(_ttl().total_seconds())
        return bool(self._refresh(keys=[self.key(kyma_id)], args=[eta, _stamp(now), ttl]))


@functools.cache
def _flags(url: str, prefix: str) -> ReconcileFlags:
    return RedisFlags(url, prefix) if url else DatabaseFlags()


def flags() -> ReconcileFlags:
    return _flags(settings.RECONCILE_FLAGS_URL, settings.RECONCILE_FLAGS_PREFIX)
