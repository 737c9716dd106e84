"""Kombu's filesystem transport (the quickstart's broker), with messages that appear whole.

Kombu writes a message file in place: create, lock, write. A worker polling the folder moves and
reads files without taking that lock, so it can read a file between create and write, find it
empty, and stop with "Unrecoverable error: JSONDecodeError" (seen when tasks are published while
a worker polls, e.g. a reconcile retrying itself). Here a message is written under a name the
consumer skips and then renamed into place, which is atomic within one filesystem.
``controlplane.celery`` makes ``filesystem://`` broker URLs use this transport.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


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
