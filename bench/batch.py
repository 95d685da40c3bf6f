"""Atomic batches against single fenced publishes: what storing K records costs each way.

Per round, on the native transport: K fenced publishes one after another (each waits for its
ack), then one atomic batch of the same K records with the expectation on its first. On a
file-storage stream nats-server stages each in-flight batch in a file store of its own (created
and removed per batch), a fixed cost per batch that a memory-storage stream does not pay; the
memory stream is measured too, to show where the time goes. Median of the rounds, because the
machine is shared.
"""

from __future__ import annotations

import secrets
import statistics
import time

import trio

from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import BatchMsg, StreamSpec, Transport, open_trio_nats_transport

BODY_BYTES = 200
#: Records per append measured.
RECORD_COUNTS = (1, 3, 10, 100)
ROUNDS = 40
QUICK_ROUNDS = 8


async def _round_us(
    t: Transport, subject: str, records: int, *, batch: bool, tail: int
) -> tuple[float, int]:
    """One append of ``records`` records (microseconds) and the subject's new tail."""
    body = b"x" * BODY_BYTES
    start = time.perf_counter()
    if batch:
        ack = await t.publish_batch(
            [BatchMsg(subject, body)] * records, expected_last_subject_seq=tail
        )
        tail = ack.last_seq
    else:
        for _ in range(records):
            tail = await t.publish(subject, body, expected_last_subject_seq=tail)
    return (time.perf_counter() - start) * 1e6, tail


async def _measure(storage: str, sync_always: bool, rounds: int) -> dict[int, tuple[float, float]]:
    out: dict[int, tuple[float, float]] = {}
    async with (
        open_nats_server(sync_always=sync_always) as server,
        open_trio_nats_transport(server.url, name="bench-batch") as t,
    ):
        name = f"BENCH_{secrets.token_hex(4)}"
        await t.ensure_stream(StreamSpec(name, (f"{name}.>",), allow_atomic=True))
        if storage == "memory":
            await t.request(f"$JS.API.STREAM.DELETE.{name}", b"")
            await t.request(
                f"$JS.API.STREAM.CREATE.{name}",
                (
                    f'{{"name": "{name}", "subjects": ["{name}.>"], "storage": "memory", '
                    '"allow_atomic": true}'
                ).encode(),
            )
        for records in RECORD_COUNTS:
            single: list[float] = []
            batched: list[float] = []
            subject = f"{name}.r{records}"
            tail = 0
            for _ in range(rounds):
                took, tail = await _round_us(t, subject, records, batch=False, tail=tail)
                single.append(took)
                took, tail = await _round_us(t, subject, records, batch=True, tail=tail)
                batched.append(took)
            out[records] = (statistics.median(single), statistics.median(batched))
    return out


def run(*, quick: bool = False) -> dict[str, float]:
    """Print the section and return the batch-to-singles ratio for 3 records on a file stream."""
    rounds = QUICK_ROUNDS if quick else ROUNDS
    print(f"== batch: K fenced records of {BODY_BYTES} B, as K publishes or one atomic batch "
          f"(native transport), median of {rounds} rounds, us")  # fmt: skip
    figures: dict[str, float] = {}
    for storage, sync_always in (("file", True), ("file", False), ("memory", False)):
        result = trio.run(_measure, storage, sync_always, rounds)
        label = f"{storage}{', sync always' if sync_always else ''}"
        for records, (single, batched) in result.items():
            ratio = batched / single
            print(f"  {label:18} K={records:3}: {records} publishes {single:9.0f}   "
                  f"one batch {batched:9.0f}   batch/publishes {ratio:6.2f}x")  # fmt: skip
        if storage == "file" and sync_always:
            single3, batched3 = result[3]
            figures["batch3_over_publishes"] = round(batched3 / single3, 2)
    return figures
