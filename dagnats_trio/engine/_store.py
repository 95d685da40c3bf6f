"""Run snapshots are written here and nowhere else: the engine owns them.

The API creates a run's first snapshot before it publishes ``workflow.started`` (so the run can
be read as soon as ``POST /runs`` answers); it does so through :func:`write_first_snapshot`, the
engine's function, so the shape of a new run and the key it lives under have one author.
Every later write is the engine's compare-and-set in its shell. Creating a snapshot also
indexes the run (:mod:`._run_index`), first, so the index never misses a run that exists.
"""

from __future__ import annotations

from ..dag import WorkflowDef
from ..protocol import WorkflowStarted, layout
from ..transport import KeyExists, Transport
from ._run_index import drop_active_if_finished, index_run
from .core import new_run_snapshot
from .snapshot import RunSnapshot, encode_snapshot


async def create_snapshot(transport: Transport, snapshot: RunSnapshot) -> int:
    """Write a snapshot where none is (create-only); its revision. :class:`KeyExists` if one is.

    The run is indexed before the snapshot is written. When one was there already (a retried
    start), the active marker just written may belong to a run that has finished: removed then.
    """
    await index_run(transport, snapshot)
    try:
        return await transport.kv_create(
            layout.RUNS_BUCKET, layout.run_key(snapshot.run_id), encode_snapshot(snapshot)
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
    transport: Transport, event: WorkflowStarted, definition: WorkflowDef
) -> int | None:
    """Write :func:`first_snapshot`; its revision, or None when the run has one already (a
    start retried with its idempotency key), which is left as it is."""
    try:
        return await create_snapshot(transport, first_snapshot(event, definition))
    except KeyExists:
        return None


def started_with(
    event: WorkflowStarted, definition: WorkflowDef | None
) -> tuple[RunSnapshot, int] | None:
    """The run's first snapshot and its revision, derived from the ``workflow.started`` that
    names them instead of read (one waited round trip fewer per run); None when the event names
    no revisions or ``definition`` is not the one stored at ``event.definition_revision``
    (the caller passes only that one, or None).

    Safe to compare-and-set on: the service wrote ``first_snapshot(event, definition)`` at
    ``event.snapshot_revision`` with the definition read at ``event.definition_revision`` (a KV
    revision names one write, so that definition is this one), and published the event after.
    The event's input is the JSON of the service's, as a read snapshot's would be. A KV update
    on a revision succeeds only while that revision is the key's last write, that is while the
    stored snapshot is still exactly the derived one; a run that moved on (a start applied by
    an earlier delivery, a cancel, a purge) has a later revision, the update fails, and the
    engine reads the snapshot as before.
    """
    if event.snapshot_revision is None or event.definition_revision is None:
        return None
    if definition is None:
        return None
    return first_snapshot(event, definition), event.snapshot_revision
