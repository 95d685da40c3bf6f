"""Provisioning: the streams and buckets of :mod:`dagnats_trio.protocol.layout`, on start.

The history and journal streams allow atomic batches (several records stored whole or not at
all; nats-server 2.12+). Provisioning updates a stream that exists with another config, so a
store made before a setting existed gets it at the next start, except a stream's work-queue
retention, which nats-server cannot change either way: such a stream keeps the retention it has.

The task stream is a limits stream, not a work queue: under a work queue every ack removes its
task, and a removal that is not by a limit writes a tombstone that the file store fsyncs with
``sync_interval: always`` (4 of a scripted agent run's 33 fsynced writes). Each task type's
durable consumer still holds a task to one delivery at a time, redelivers it after its AckWait
and remembers its acks (its ack floor) across restarts, so nothing else changes for readers; a
run's tasks are removed together when the run ends (one purge, one fsync: ``engine._run_end``)
or with the run. A store provisioned before keeps its task stream a work queue, which works as
before (docs/upgrading.md says how to move it).

The timer stream is a limits stream too, for the same reason (a fired timer's ack was a
tombstone): the engines' durable timer consumer naks a timer until it is due, acks it once its
``timer.fired`` is stored, and its ack floor keeps a fired timer from being delivered again; a
run's timers go in one purge when the run ends, a pending one included (docs/jetstream.md, "The
timer stream"). A store provisioned before keeps its timer stream a work queue and runs as
before.

Each stream a run's end purges (``layout.SENTINEL_STREAMS``) holds a sentinel: one empty
message on a subject of its own (``layout.sentinel_subject``), stored when the stream is ensured
and only if the subject holds none (so at most one, however often a store is provisioned, a
store made before included). Nothing else publishes, purges or reads that subject: no consumer's
filter matches it (``task.{type}.*``, ``sleep.*.*``), a run's purges name the run, and the one
reader of a whole stream (the active-marker listing) skips it. So no purge empties the stream,
which would make nats-server remove its block file, create a new one and fsync a tombstone into
it (a file created and one removed per run's end, on the disk the next run's writes wait for).
"""

from __future__ import annotations

import functools

from dagnats_trio.protocol.layout import (
    CHECKPOINTS_BUCKET,
    DEFS_BUCKET,
    HISTORY_DUPLICATE_WINDOW_S,
    HISTORY_STREAM,
    INPUTS_BUCKET,
    JOURNAL_MAX_AGE_S,
    JOURNAL_STREAM,
    RUN_ACTIVE_FILTER,
    RUN_ACTIVE_STREAM,
    RUN_INDEX_FILTER,
    RUN_INDEX_STREAM,
    RUNS_BUCKET,
    SENTINEL_STREAMS,
    SIGNALS_BUCKET,
    TASK_STREAM,
    TIMER_STREAM,
    WORKER_POLLS_BUCKET,
    WORKER_POLLS_MAX_AGE_S,
    sentinel_subject,
)

from ._errors import WrongLastSequence
from ._interface import Transport
from ._retry import retry_transient
from ._values import BucketSpec, StreamSpec

STREAMS: tuple[StreamSpec, ...] = (
    StreamSpec(
        HISTORY_STREAM,
        ("history.*",),
        duplicate_window_s=HISTORY_DUPLICATE_WINDOW_S,
        allow_atomic=True,
    ),
    StreamSpec(TASK_STREAM, ("task.*.*", sentinel_subject(TASK_STREAM))),
    StreamSpec(TIMER_STREAM, ("sleep.*.*", sentinel_subject(TIMER_STREAM))),
    StreamSpec(JOURNAL_STREAM, ("journal.*.*",), max_age_s=JOURNAL_MAX_AGE_S, allow_atomic=True),
    StreamSpec(RUN_INDEX_STREAM, (RUN_INDEX_FILTER,)),
    StreamSpec(RUN_ACTIVE_STREAM, (RUN_ACTIVE_FILTER, sentinel_subject(RUN_ACTIVE_STREAM))),
)

BUCKETS: tuple[BucketSpec, ...] = (
    BucketSpec(DEFS_BUCKET, history=5),
    BucketSpec(RUNS_BUCKET),
    BucketSpec(CHECKPOINTS_BUCKET),
    BucketSpec(SIGNALS_BUCKET),
    BucketSpec(INPUTS_BUCKET, message_ttl=True),
    BucketSpec(WORKER_POLLS_BUCKET, ttl_s=WORKER_POLLS_MAX_AGE_S),
)


async def provision(transport: Transport, replicas: int = 1) -> None:
    """Create or update every stream and bucket of the layout; safe to run at every start. Each
    call is retried while it fails transiently (no leader, timeout: ``retry_transient``), as a
    cluster electing its leaders answers: every call is a create-or-update, so a retry after a
    lost answer finds its work done."""
    for stream in STREAMS:
        await retry_transient(functools.partial(transport.ensure_stream, stream, replicas))
        if stream.name in SENTINEL_STREAMS:
            await ensure_sentinel(transport, stream.name)
    for bucket in BUCKETS:
        await retry_transient(functools.partial(transport.ensure_bucket, bucket, replicas))


async def ensure_sentinel(transport: Transport, stream: str) -> None:
    """Store ``stream``'s sentinel unless its subject holds one already (see the module
    docstring). A transient failure is retried (``retry_transient``): a stream just created
    with replicas may not have elected its leader yet (the cluster soak, on a loaded machine,
    saw provisioning refused so), and a retry after a lost answer finds the sentinel stored."""

    async def store() -> None:
        try:
            await transport.publish(sentinel_subject(stream), b"", expected_last_subject_seq=0)
        except WrongLastSequence:
            return

    await retry_transient(store)
