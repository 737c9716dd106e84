"""The filesystem broker never shows a consumer a message that is still being written."""

from __future__ import annotations

import multiprocessing
import os

from kombu import Connection

from controlplane.broker import Transport

MESSAGES = 150
PAYLOAD = "x" * 2_000_000  # large: writing one takes long enough for a poller to catch it


def options(folder: str) -> dict:
    return {
        "data_folder_in": folder,
        "data_folder_out": folder,
        "control_folder": os.path.join(folder, "control"),  # not ./control in the working directory
        "store_processed": False,
        "polling_interval": 0,
    }


def produce(folder: str) -> None:
    with Connection(transport=Transport, transport_options=options(folder)) as conn:
        queue = conn.SimpleQueue("q")
        for _ in range(MESSAGES):
            queue.put(PAYLOAD)
        queue.close()


def test_messages_appear_whole_while_a_consumer_polls(tmp_path):
    folder = str(tmp_path)
    producer = multiprocessing.get_context("fork").Process(target=produce, args=(folder,))
    received = 0
    with Connection(transport=Transport, transport_options=options(folder)) as conn:
        queue = conn.SimpleQueue("q")
        producer.start()
        while received < MESSAGES:
            message = queue.get(timeout=30)  # a half-written file fails to decode here
            assert message.payload == PAYLOAD
            message.ack()
            received += 1
        queue.close()
    producer.join(30)
    assert not [name for name in os.listdir(folder) if name.endswith(".partial")]
