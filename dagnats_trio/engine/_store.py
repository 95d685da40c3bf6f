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


async def write_first_snapshot(
    transport: Transport, event: WorkflowStarted, definition: WorkflowDef, now_ms: int
) -> bool:
    """The snapshot of a run not yet started; False when the run has one already (a start
    retried with its idempotency key), which is left as it is."""
    try:
        await create_snapshot(transport, new_run_snapshot(event, definition, now_ms))
    except KeyExists:
        return False
    return True
