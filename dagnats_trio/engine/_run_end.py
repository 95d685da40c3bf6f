"""What a run's end removes: its active marker and its tasks, once its finished snapshot is saved.

- The active marker (``engine._run_index``): ``?status=running`` stops reading the run.
- Its tasks: the task stream is a limits stream (``transport.provision``), so an ack removes
  nothing (a work queue's ack writes a tombstone the file store fsyncs, one per task); the run's
  tasks, acked or not, stay until here and go in ONE purge of ``task.*.{run}``: one fsync for
  all of them. None is needed again: the run is finished (a finished snapshot is never changed
  back), so the engine drops every event a task of it could still lead to. A task published by
  a stalled engine after this purge stays until the run's own purge; it is harmless in the same
  way. On a store whose task stream is still a work queue the purge finds nothing and writes
  nothing.

The two are sent at once, after the save, so a client (which sees the run end when the snapshot
is saved) waits for neither. A failure leaves a stale marker (the next listing that meets it
checks the snapshot and removes it) or the tasks (they go with the run's purge): never wrong, so
it is logged, not raised.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from .._concurrency import run_all
from ..protocol import layout
from ..transport import Transport, TransportError
from ._run_index import drop_active

log = logging.getLogger("dagnats_trio.engine.run_end")


async def drop_tasks(transport: Transport, run_id: str) -> None:
    """Remove every task message of the run (any task type), acked or not."""
    await transport.purge_subject(layout.TASK_STREAM, layout.run_tasks_filter(run_id))


#: What a run's end removes, each by a call of (transport, run id), named for the log.
_REMOVALS: tuple[tuple[str, Callable[[Transport, str], Awaitable[None]]], ...] = (
    ("active marker", drop_active),
    ("tasks", drop_tasks),
)


async def end_run(transport: Transport, run_id: str) -> None:
    """Remove the finished run's active marker and tasks, at once; failures are logged."""

    async def remove(what: str, drop: Callable[[Transport, str], Awaitable[None]]) -> None:
        try:
            await drop(transport, run_id)
        except TransportError as exc:
            log.warning("run %s: %s not removed (%s)", run_id, what, exc)

    await run_all(
        [functools.partial(remove, what, drop) for what, drop in _REMOVALS],
        in_flight_max=len(_REMOVALS),
    )
