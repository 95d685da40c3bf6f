"""Run snapshots are written here and nowhere else: the engine owns them.

The API creates a run's first snapshot before it publishes ``workflow.started`` (so the run can
be read as soon as ``POST /runs`` answers); it does so through :func:`write_first_snapshot`, the
engine's function, so the shape of a new run and the key it lives under have one author.
Every later write is the engine's compare-and-set in its shell. Creating a snapshot also
indexes the run (:mod:`._run_index`), first, so the index never misses a run that exists: in
the same call, or, for the service's start, beside the definition's read (:func:`index_start`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

import attrs

from ..dag import WorkflowDef
from ..protocol import RunIndexEntry, StartDispatch, WorkflowStarted, encode_event, layout
from ..transport import KeyExists, KvEntry, PublishMsg, Transport, TransportError
from ._execute import task_publish_msg
from ._run_index import (
    check_indexed,
    drop_active_if_finished,
    index_entry,
    index_msgs,
    index_run,
    unindex_run,
)
from .core import first_dispatch, first_dispatch_again, new_run_snapshot, started_msg_id
from .effects import PublishTask
from .snapshot import RunSnapshot, SnapshotEncoder, encode_snapshot


@final
@attrs.frozen
class IndexedStart:
    """The proof that a run not created yet is indexed (its entry and active marker stored),
    made by :func:`index_start` only: the snapshot it names is then written alone."""

    entry: RunIndexEntry


async def index_start(
    transport: Transport, event: WorkflowStarted, take: Callable[[KvEntry | None], None]
) -> IndexedStart:
    """Index the run ``event`` starts while its definition is read: the read of
    ``event.workflow`` in the definitions bucket and the index's two writes in one call
    (``Transport.kv_get_and_publish_many``: sent at once, on the native client one socket
    write and no task), one round trip of latency where the read and then the index were two.
    ``take`` is given what the read found (None: nothing under the name) and raises to
    refuse the start (the service's check of its definition).

    The index is still written before the snapshot (the snapshot is created only with the
    proof this returns), so no run whose snapshot exists is ever left out of a listing. When
    the read fails or ``take`` refuses it, the index writes (answered by then, so none lands
    after its removal) are taken back (:func:`~._run_index.unindex_run`) before the error is
    raised: a start refused (a workflow deleted meanwhile) leaves nothing that would grow.
    Only a crash between the two leaves an entry without a snapshot, as a crash before any
    snapshot does (a listing skips it). The caller indexes this way only for a workflow it has
    read before: a start of a name never seen (a fuzzer's) reads it first and writes nothing.
    """
    entry = started_index_entry(event)
    read, results = await transport.kv_get_and_publish_many(
        layout.DEFS_BUCKET, event.workflow, index_msgs(entry, active=True)
    )
    check_indexed(results)
    try:
        if isinstance(read, TransportError):
            raise read
        take(read)
    except Exception:
        await unindex_run(transport, event.run_id)
        raise
    return IndexedStart(entry)


def started_index_entry(event: WorkflowStarted) -> RunIndexEntry:
    """The index entry of :func:`first_snapshot` of ``event``, whatever the definition (checked
    against the snapshot's own by :func:`create_snapshot`, the one author being
    :func:`~._run_index.index_entry`)."""
    return RunIndexEntry(event.run_id, event.workflow, event.started_at_ms)


async def create_snapshot(
    transport: Transport,
    snapshot: RunSnapshot,
    *,
    indexed: IndexedStart | None = None,
    encoder: SnapshotEncoder | None = None,
) -> int:
    """Write a snapshot where none is (create-only); its revision. :class:`KeyExists` if one is.

    ``encoder``: the caller's :class:`SnapshotEncoder`, for one who creates many runs of the
    same definitions (the service, an engine's children), so a definition is spelled once.

    The run is indexed before the snapshot is written, unless ``indexed`` proves it is (an
    index written for another entry, a definition whose name is not the one the start asked
    for, is taken back and written again). When a snapshot was there already (a retried
    start), the active marker just written may belong to a run that has finished: removed then.
    """
    if indexed is None or indexed.entry != index_entry(snapshot):
        if indexed is not None:
            await unindex_run(transport, indexed.entry.run_id)
        await index_run(transport, snapshot)
    try:
        return await transport.kv_create(
            layout.RUNS_BUCKET,
            layout.run_key(snapshot.run_id),
            encode_snapshot(snapshot) if encoder is None else encoder.encode(snapshot),
        )
    except KeyExists:
        if not snapshot.status.finished:
            await drop_active_if_finished(transport, snapshot.run_id)
        raise


def first_snapshot(event: WorkflowStarted, definition: WorkflowDef) -> RunSnapshot:
    """The snapshot of a run not yet started, a pure function of its ``workflow.started``
    (its ``started_at_ms`` is the time) and its definition: what the service writes, and what
    the engine derives from the same two instead of reading it back (``started_with``)."""
    return new_run_snapshot(event, definition, event.started_at_ms)


async def write_first_snapshot(
    transport: Transport,
    event: WorkflowStarted,
    definition: WorkflowDef,
    *,
    indexed: IndexedStart | None = None,
    encoder: SnapshotEncoder | None = None,
) -> int | None:
    """Write :func:`first_snapshot` (indexed first, unless ``indexed`` proves it is: see
    :func:`create_snapshot`); its revision, or None when the run has one already (a start
    retried with its idempotency key), which is left as it is."""
    try:
        return await create_snapshot(
            transport, first_snapshot(event, definition), indexed=indexed, encoder=encoder
        )
    except KeyExists:
        return None


def started_with(
    event: WorkflowStarted, definition: WorkflowDef | None
) -> tuple[RunSnapshot, int] | None:
    """The run's first snapshot and its revision, derived from the ``workflow.started`` that
    names them instead of read (one waited round trip fewer per run); None when the event names
    no revisions, names both kinds of first snapshot (no service of ours does), or
    ``definition`` is not the one stored at ``event.definition_revision`` (the caller passes
    only that one, or None).

    Two kinds: ``snapshot_revision`` names :func:`first_snapshot` (the start not applied: the
    engine decides it); ``dispatched`` names the snapshot :func:`start_dispatched` created,
    the start applied by the service, made again from the ids its decision drew
    (``core.first_dispatch_again``, None when they are not that decision's). Never the first
    kind for the second: the engine would decide the start again and dispatch twice (hence a
    field of its own, which an engine from before it ignores and reads).

    Safe to use: the service wrote that snapshot at that revision with the definition read at
    ``event.definition_revision`` (a KV revision names one write, so that definition is this
    one), and published the event after. The event's input is the JSON of the service's, as a
    read snapshot's would be. A KV update on a revision succeeds only while that revision is
    the key's last write, that is while the stored snapshot is still exactly the derived one; a
    run that moved on (a start applied by an earlier delivery, a cancel, a purge) has a later
    revision, the update fails, and the engine reads the snapshot as before. A dispatched one
    is not saved on by the start: its outbox entry's tasks are repeated (duplicates by their
    msg ids) and the copy is kept for the run's next event, whose compare-and-set fails on a
    run that moved on. Those tasks are repeated without asking the store whether the run moved
    on meanwhile, as they were after a read (the read and the repeat were never one step).
    """
    if definition is None or event.definition_revision is None:
        return None
    if event.dispatched is not None:
        if event.snapshot_revision is not None:
            return None
        snapshot = first_dispatch_again(event, definition)
        return None if snapshot is None else (snapshot, event.dispatched.snapshot_revision)
    if event.snapshot_revision is None:
        return None
    return first_snapshot(event, definition), event.snapshot_revision


async def start_dispatched(
    transport: Transport,
    event: WorkflowStarted,
    definition: WorkflowDef,
    new_id: Callable[[], str],
    *,
    indexed: IndexedStart | None = None,
    encoder: SnapshotEncoder | None = None,
) -> bool:
    """Start ``event``'s run with its first dispatch already made: the first snapshot is
    created holding the decision on ``event`` (``core.first_dispatch``: ``started``, its tasks
    saved in its outbox), then its tasks and ``event`` are published at once (one
    ``publish_many``, each with the msg id the engine gives it, so any repeat is stored once).
    The engine's compare-and-set and its hop are off the run's critical path: a worker can
    take the first task as soon as the start is answered. False, with nothing written, when the
    decision is not tasks only (the caller starts the run as before).

    The engine, given ``event``, finds the decision applied and repeats the outbox entry's
    tasks (``core.service_start_entry``), as it repeats its own entry when an event comes
    again after a crash between its save and its publishes: a start that died after the
    snapshot and before the publishes is converged by what converges one that died before its
    ``workflow.started`` (a retry with its idempotency key publishes it, or, without a key, the
    engine's start sweep: ``_start_sweep``). A snapshot there
    already (such a retry) is left as it is, and ``event`` alone is published, as
    :func:`write_first_snapshot`'s caller does.

    ``event`` may name the revision of ``definition`` (``definition_revision``; never
    ``snapshot_revision``, which names an undispatched snapshot): the event published then
    names the created snapshot's revision and the ids the decision drew (``dispatched``), so
    the engine holding that definition rebuilds the snapshot (:func:`started_with`) and reads
    nothing. A retry that found a snapshot names neither revision: the engine reads it.
    """
    drawn: list[str] = []

    def draw() -> str:
        drawn.append(new_id())
        return drawn[-1]

    out = first_dispatch(event, definition, draw)
    if out is None or out.snapshot is None:
        return False
    msgs = [task_publish_msg(e) for e in out.effects if isinstance(e, PublishTask)]
    try:
        revision = await create_snapshot(transport, out.snapshot, indexed=indexed, encoder=encoder)
    except KeyExists:
        # Made by an earlier attempt, maybe from another revision of the definition.
        msgs, event = [], attrs.evolve(event, definition_revision=None)
    else:
        event = attrs.evolve(event, dispatched=StartDispatch(revision, tuple(drawn)))
    msgs.append(started_publish_msg(event))
    for result in await transport.publish_many(msgs):
        if isinstance(result, TransportError):
            raise result
    return True


def started_publish_msg(event: WorkflowStarted) -> PublishMsg:
    """How a run's ``workflow.started`` is published (its msg id: ``core.started_msg_id``)."""
    return PublishMsg(
        layout.history_subject(event.run_id),
        encode_event(event),
        msg_id=started_msg_id(event.run_id),
    )
