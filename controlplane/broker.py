"""Kombu's filesystem transport (the quickstart's broker), with messages that appear whole.

Kombu writes a message file in place: create, lock, write. A worker polling the folder moves and
reads files without taking that lock, so it can read a file between create and write, find it
empty, and stop with "Unrecoverable error: JSONDecodeError" (seen when tasks are published while
a worker polls, e.g. a reconcile retrying itself). Here a message is written under a name the
consumer skips and then renamed into place, which is atomic within one filesystem.
``controlplane.celery`` makes ``filesystem://`` broker URLs use this transport.

Redis: a worker survives the broker going away while it holds messages, and gives them back
promptly once it is back (:class:`RedisChannel`); ``redis://`` and ``rediss://`` URLs use it.
What a worker holds unacknowledged (tasks reserved, waiting for their ETA, or running) is kept by
Redis in an "unacked" hash until acknowledged; kombu puts it back in the queue when the channel
closes, or else only after the visibility timeout. When the connection was lost, that restore ran
against a closed transport and raised AttributeError, which ended the worker; and with Redis down
it could not run anyway. Here the restore that cannot reach the broker keeps the delivery tags,
and the channel of the reconnecting worker restores them (tests/integration/test_broker_outage.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any

from celery.worker import state as worker_state
from kombu.exceptions import ChannelError
from kombu.transport import filesystem, redis, virtual
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps
from redis import exceptions as redis_exceptions

logger = logging.getLogger(__name__)


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # A leading dot: the consumer only takes "<stamp>_<uuid>.<queue>.msg" names.
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4().hex}.partial")
        try:
            with open(partial, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


# --- Redis: what a worker held during an outage goes back to the queue as soon as it can -----------


class _HeldDuringOutage:
    """What channels could not settle with the broker while it was unreachable, by broker (host,
    port, database, key): delivery tags to *restore* (held unacknowledged when the connection went:
    reserved, waiting for their ETA) and tags to *acknowledge* (tasks that finished and could not
    say so). The next channel to that broker (the worker reconnecting) settles both; a tag settled
    already is skipped there (kombu's restore is a transaction on the unacked hash). A task still
    running then acknowledges its own message when it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._restore: dict[tuple, list[str]] = {}
        self._ack: dict[tuple, set[str]] = {}

    def keep(self, broker: tuple, tags: list[str]) -> None:
        with self._lock:
            done = self._ack.get(broker, set())
            self._restore.setdefault(broker, []).extend(tag for tag in tags if tag not in done)

    def acknowledged(self, broker: tuple, tag: str) -> None:
        with self._lock:
            self._ack.setdefault(broker, set()).add(tag)
            if tag in self._restore.get(broker, ()):
                self._restore[broker].remove(tag)

    def take(self, broker: tuple) -> tuple[list[str], set[str]]:
        with self._lock:
            return self._restore.pop(broker, []), self._ack.pop(broker, set())


HELD_DURING_OUTAGE = _HeldDuringOutage()
# Seconds after reconnecting before the held messages are settled: the event loop's first turns
# send the acknowledgements queued while the broker was away.
SETTLE_AFTER = 1.0
_UNREACHABLE = (redis_exceptions.ConnectionError, redis_exceptions.TimeoutError, OSError)


class RedisQoS(redis.QoS):
    def restore_unacked(self, client: Any = None) -> None:
        """Put back what this channel holds unacknowledged (reserved, ETA and running tasks) as
        kombu does when a channel closes; when the broker cannot be reached then, remember the
        tags for the next channel instead of raising: kombu's own restore raised
        ``AttributeError('NoneType' object has no attribute 'hostname')`` here after a lost
        connection, which stopped the worker (issue 26), and left the messages to the
        visibility timeout (600 s)."""
        tags = list(self._delivered)
        try:
            super().restore_unacked(client)
        except Exception as exc:
            self._delivered.clear()
            HELD_DURING_OUTAGE.keep(self.channel.broker_identity, tags)
            logger.warning(
                "broker unreachable (%s: %s): %d unacknowledged message(s) go back to the queue "
                "once it answers again",
                type(exc).__name__,
                exc,
                len(tags),
            )

    def ack(self, delivery_tag: str) -> None:
        """A task finished while the broker is unreachable: the acknowledgement is made once it
        answers again (the message is not restored then: the task does not run twice)."""
        try:
            super().ack(delivery_tag)
        except _UNREACHABLE:
            HELD_DURING_OUTAGE.acknowledged(self.channel.broker_identity, delivery_tag)
            virtual.QoS.ack(self, delivery_tag)


class RedisChannel(redis.Channel):
    """kombu's Redis channel that survives its transport being closed under it (the worker's
    connection was lost): it keeps the parameters it connected with, so acknowledging or restoring
    a message later still reaches the broker, and it restores what a channel before it could not."""

    QoS = RedisQoS
    _sync_params: dict[str, Any] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # connects (PING): the broker answers
        self._sync_params = super()._connparams(asynchronous=False)

    @property
    def broker_identity(self) -> tuple:
        params = self._sync_params or {}
        return (
            params.get("host"),
            params.get("port"),
            params.get("path"),
            params.get("db"),
            self.unacked_key,
        )

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = self.connection
        if transport is not None and transport.client is not None:
            return super()._connparams(asynchronous=asynchronous)
        if asynchronous or self._sync_params is None:
            raise redis_exceptions.ConnectionError("the connection to the broker was closed")
        return dict(self._sync_params)

    def settle_held(self) -> None:
        """Settle what channels of this process could not while the broker was unreachable."""
        restore, acknowledged = HELD_DURING_OUTAGE.take(self.broker_identity)
        # Tasks of this process still running (or finished, their acknowledgement not sent yet)
        # settle their message themselves when they end: restoring it would run them twice.
        running = {request.message.delivery_tag for request in list(worker_state.active_requests)}
        restore = [tag for tag in restore if tag not in running]
        if restore or acknowledged:
            logger.info(
                "broker back: %d message(s) held during its outage queued again, %d acknowledged",
                len(restore),
                len(acknowledged),
            )
        try:
            for tag in list(acknowledged):
                self.qos._remove_from_indices(tag).execute()
                acknowledged.discard(tag)
            for tag in list(restore):
                self.qos.restore_by_tag(tag)
                restore.remove(tag)
        finally:  # what the broker did not take yet waits for the next channel
            for tag in acknowledged:
                HELD_DURING_OUTAGE.acknowledged(self.broker_identity, tag)
            HELD_DURING_OUTAGE.keep(self.broker_identity, restore)


class RedisTransport(redis.Transport):
    Channel = RedisChannel

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        """The worker (re)connected: once its event loop has sent the acknowledgements of tasks
        that finished while the broker was away (callbacks waiting on the loop, run in its first
        turn), settle what is still held."""
        super().register_with_event_loop(connection, loop)
        loop.call_later(SETTLE_AFTER, self._settle_held)

    def _settle_held(self) -> None:
        for channel in list(self.channels):
            if not channel.closed:
                channel.settle_held()
                return
