"""The run index: what makes listing runs newest first cost a page, not the whole store.

Two streams, one message per run in each (subject per run, see ``protocol.layout``):

- ``RUN_INDEX`` (``runindex.{run}``): written once, when the run's first snapshot is created, so
  the stream sequence is the start order. A page, newest first, is read from the last sequence
  backwards; a purge removes the run's message (a gap the reader skips).
- ``RUN_ACTIVE`` (``runactive.{run}``): present while the run may be running. ``?status=running``
  reads only this stream, so it costs what the running runs cost.

The snapshot stays the truth; the index is a hint that is never behind it in the direction that
would hide a run. Each message is written *before* the snapshot it describes (an index entry
before the snapshot exists, the active marker before the run can be seen running) and the active
marker is removed only *after* the snapshot says finished. A crash between the two writes
leaves either an entry without a snapshot (the reader skips it; a retried start finds it in
place, as the publish expects the subject to be empty) or a marker of a finished run (the reader
checks the snapshot, leaves the run out and removes the stale marker). So the filters are right
after any crash. A stale marker disappears the first time a listing meets it; an entry (and
marker) without a snapshot stays, skipped by every listing, until a retried start creates the
snapshot or a purge removes it: a listing cannot tell it from a start still under way, whose
snapshot may yet be created, so removing it could hide that run (docs/listing.md); the
engine's start sweep (``_start_sweep``) leaves it for the same reason.

Writers are :func:`index_run` (called by the one function that creates snapshots, or by the
service through ``engine._store.index_start`` while it reads the definition: then, should the
start be given up, :func:`unindex_run` takes the two messages back) and :func:`drop_active`
(the engine, when it saves a finished snapshot). Stores written before the
index existed get it once from :func:`ensure_run_index`.
"""

from __future__ import annotations

import functools
import logging

from .._concurrency import run_all
from ..protocol import (
    DecodeError,
    RunIndexEntry,
    decode_run_header,
    encode_run_index_entry,
    layout,
)
from ..transport import PublishMsg, SubjectPurge, Transport, TransportError, WrongLastSequence
from .snapshot import RunSnapshot, decode_snapshot

log = logging.getLogger("dagnats_trio.engine.run_index")

#: Snapshots the one-time backfill reads at once.
BACKFILL_READS_CONCURRENT_MAX = 32
#: What the completion key of the backfill holds (the index's format version).
RUN_INDEX_VERSION = b'{"version": 1}'


def index_entry(snapshot: RunSnapshot) -> RunIndexEntry:
    return RunIndexEntry(snapshot.run_id, snapshot.workflow, snapshot.created_at_ms)


def index_msgs(entry: RunIndexEntry, *, active: bool) -> list[PublishMsg]:
    """The run's index entry and, when ``active``, its active marker, each published only where
    none is: a message already there is this one (the run was indexed before: a retried start,
    a redelivered event, a second backfill)."""
    data = encode_run_index_entry(entry)
    subjects = [layout.run_index_subject(entry.run_id)]
    if active:
        subjects.append(layout.run_active_subject(entry.run_id))
    return [PublishMsg(s, data, expected_last_subject_seq=0) for s in subjects]


def check_indexed(results: list[int | TransportError]) -> None:
    """Raise the first failure among the answers to :func:`index_msgs` (a message found
    already there is no failure)."""
    for result in results:
        if isinstance(result, TransportError) and not isinstance(result, WrongLastSequence):
            raise result


async def write_index(transport: Transport, entry: RunIndexEntry, *, active: bool) -> None:
    """Publish :func:`index_msgs`, the two at once (``Transport.publish_many``: one round trip
    of latency, one socket write and no task on the native client)."""
    check_indexed(await transport.publish_many(index_msgs(entry, active=active)))


async def index_run(transport: Transport, snapshot: RunSnapshot) -> None:
    """Write the run's index entry and, unless the snapshot is finished, its active marker (the
    two at once: one round trip of latency). Call it before the snapshot is created."""
    await write_index(transport, index_entry(snapshot), active=not snapshot.status.finished)


async def unindex_run(transport: Transport, run_id: str) -> None:
    """Remove the run's index entry and active marker (the two at once, in one call): a run
    indexed before it was created whose creation was then given up
    (``engine._store.index_start``)."""
    purges = [
        SubjectPurge(layout.RUN_INDEX_STREAM, layout.run_index_subject(run_id)),
        active_purge(run_id),
    ]
    for result in await transport.purge_subjects(purges):
        if result is not None:
            raise result


def active_purge(run_id: str) -> SubjectPurge:
    """The purge that removes the run's active marker."""
    return SubjectPurge(layout.RUN_ACTIVE_STREAM, layout.run_active_subject(run_id))


async def drop_active(transport: Transport, run_id: str) -> None:
    """Remove the run's active marker (after its finished snapshot was saved)."""
    purge = active_purge(run_id)
    await transport.purge_subject(purge.stream, purge.subject)


async def drop_active_if_finished(transport: Transport, run_id: str) -> bool:
    """Remove the marker when the stored snapshot says finished (a marker rewritten by a
    retried start of a run that has finished meanwhile); True when it was removed."""
    entry = await transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run_id))
    if entry is None or entry.value is None:
        return False
    try:
        finished = decode_run_header(entry.value).status.finished
    except DecodeError:
        return False
    if finished:
        await drop_active(transport, run_id)
    return finished


async def ensure_run_index(transport: Transport) -> int:
    """Index every run stored before the index existed, oldest first; the number indexed now.

    Runs once per store: a key in ``workflow_runs`` records that it finished, so later calls
    cost one read. Safe to run from two processes at once and to re-run after a crash (each
    message is written only where none is). It walks the whole bucket (one read per run): a
    one-time cost at the first start after an upgrade. Hosts call it before they serve, so no
    run created by this version is indexed before an older one.
    """
    done = await transport.kv_get(layout.RUNS_BUCKET, layout.RUN_INDEX_COMPLETE_KEY)
    if done is not None:
        return 0
    keys = await transport.kv_keys(layout.RUNS_BUCKET, layout.run_key(""))
    snapshots: list[RunSnapshot] = []

    async def read(key: str) -> None:
        entry = await transport.kv_get(layout.RUNS_BUCKET, key)
        if entry is None or entry.value is None:
            return
        try:
            snapshots.append(decode_snapshot(entry.value))
        except DecodeError:
            log.warning("run index: %s holds no readable snapshot; not indexed", key)

    await run_all(
        [functools.partial(read, key) for key in keys],
        in_flight_max=BACKFILL_READS_CONCURRENT_MAX,
    )
    snapshots.sort(key=lambda s: (s.created_at_ms, s.run_id))
    for snap in snapshots:  # one by one: the stream order is the start order
        await index_run(transport, snap)
    await transport.kv_put(layout.RUNS_BUCKET, layout.RUN_INDEX_COMPLETE_KEY, RUN_INDEX_VERSION)
    if snapshots:
        log.info("run index: indexed %d runs stored before it existed", len(snapshots))
    return len(snapshots)
