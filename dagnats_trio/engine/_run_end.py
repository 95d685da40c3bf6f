"""What a run's end removes: its active marker, its tasks and its timers, once its finished
snapshot is saved.

- The active marker (``engine._run_index``): ``?status=running`` stops reading the run.
- Its tasks and its timers: the task and timer streams are limits streams
  (``transport.provision``), so an ack removes nothing (a work queue's ack writes a tombstone the
  file store fsyncs, one per task or fired timer); the run's messages, acked or not, stay until
  here and go in ONE purge per stream (``task.*.{run}``, ``sleep.{run}.*``): one fsync for all
  of them. None is needed again: the run is finished (a finished snapshot is never changed
  back), so the engine drops every event a task or a timer of it could still lead to; a timer
  still pending (a wait, a step timeout) is removed before it comes due instead of firing into
  a finished run. A message published by a stalled engine after this purge stays until the
  run's own purge; it is harmless in the same way. On a store whose stream is still a work
  queue the purge finds only what no ack removed (a task still queued, a pending timer), and a
  purge that finds nothing writes nothing. The timers' purge is sent only for a run whose
  snapshot says it armed one (``RunSnapshot.timers_armed``): for a run that armed none (the
  bench's scripted agent) it would remove nothing and still cost a round trip.

They are sent after the save, by the engine's run-end task (``_run_ends``), so neither a
client (which sees the run end when the snapshot is saved) nor the engine's history loop (which
goes on with other runs' events) waits for them; the two (three) go at once, in one call
(``Transport.purge_subjects``: no task of their own, one socket write). A failure leaves
a stale marker (the next listing that meets it checks the snapshot and removes it) or the
messages (they go with the run's purge): never wrong, so it is logged, not raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..protocol import layout
from ..transport import SubjectPurge, Transport, TransportError
from ._run_index import active_purge

log = logging.getLogger("dagnats_trio.engine.run_end")

_Removal = tuple[str, Callable[[str], SubjectPurge]]


def tasks_purge(run_id: str) -> SubjectPurge:
    """Every task message of the run (any task type), acked or not."""
    return SubjectPurge(layout.TASK_STREAM, layout.run_tasks_filter(run_id))


def timers_purge(run_id: str) -> SubjectPurge:
    """Every timer of the run (any step, any kind), fired or pending."""
    return SubjectPurge(layout.TIMER_STREAM, layout.run_timers_filter(run_id))


#: What every run's end removes, each a purge of the run's id, named for the log.
_REMOVALS: tuple[_Removal, ...] = (("active marker", active_purge), ("tasks", tasks_purge))
#: The same for a run that armed a timer.
_REMOVALS_WITH_TIMERS: tuple[_Removal, ...] = (*_REMOVALS, ("timers", timers_purge))


async def end_run(transport: Transport, run_id: str, *, timers_armed: bool) -> None:
    """Remove the finished run's active marker and tasks, and its timers if it armed any, in
    one call (``Transport.purge_subjects``: sent at once, no task per purge); failures are
    logged."""
    removals = _REMOVALS_WITH_TIMERS if timers_armed else _REMOVALS
    try:
        results = await transport.purge_subjects([purge(run_id) for _, purge in removals])
    except TransportError as exc:
        log.warning("run %s: %s not removed (%s)", run_id, _names(removals), exc)
        return
    for (what, _), result in zip(removals, results, strict=True):
        if result is not None:
            log.warning("run %s: %s not removed (%s)", run_id, what, result)


def _names(removals: tuple[_Removal, ...]) -> str:
    return ", ".join(what for what, _ in removals)
