"""Run events: everything published on ``history.{run}`` and consumed by the engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Final, final

import attrs

from ._codec import JsonValue, encoder_of, from_json, register_union
from .common import DispatchId, ParentRef, Wait
from .records import CommitAction


@final
@attrs.frozen
class StartDispatch:
    """What a service that made a run's first dispatch itself (``engine.start_dispatched``)
    tells the engine in its ``workflow.started``: the revision it created the run's first
    snapshot at, and the ids that decision drew (the dispatch nonces, in the order drawn). The
    rest of that snapshot is a pure function of the event and its definition, so the engine
    rebuilds it exactly instead of reading it (``engine._store.started_with``).

    A field of its own, not ``snapshot_revision``: that one names an UNdispatched first
    snapshot, and an engine that derived one at this revision would dispatch the step a second
    time. An engine from before this field ignores it (the converter skips unknown keys) and
    reads the snapshot, as it did."""

    snapshot_revision: int
    nonces: tuple[str, ...]


@final
@attrs.frozen
class WorkflowStarted:
    """A run's start. ``snapshot_revision`` and ``definition_revision`` are set by the service
    that wrote the run's first snapshot from this very event (``engine.new_run_snapshot`` of
    it, the definition stored at ``definition_revision`` and ``started_at_ms``) at
    ``snapshot_revision``: the engine can then derive that snapshot instead of reading it (see
    ``engine._store.started_with``). ``dispatched`` (with ``definition_revision``) instead,
    never both, when the service also made the start's dispatch in that snapshot
    (:class:`StartDispatch`). None when the service did not write it (a retried start left
    the run's snapshot as it was, a child run's start, an older service)."""

    TYPE: ClassVar[str] = "workflow.started"
    run_id: str
    workflow: str
    input: JsonValue = None
    parent: ParentRef | None = None
    idempotency_key: str | None = None
    started_at_ms: int = 0
    snapshot_revision: int | None = None
    definition_revision: int | None = None
    dispatched: StartDispatch | None = None


@final
@attrs.frozen
class StepCompleted:
    TYPE: ClassVar[str] = "step.completed"
    run_id: str
    step_id: str
    dispatch: DispatchId | None = None
    output: JsonValue = None
    journal_seq: int | None = None


@final
@attrs.frozen
class StepFailed:
    TYPE: ClassVar[str] = "step.failed"
    run_id: str
    step_id: str
    dispatch: DispatchId | None = None
    error: str = ""
    retriable: bool = True
    reason: str | None = None
    journal_seq: int | None = None


@final
@attrs.frozen
class StepContinue:
    TYPE: ClassVar[str] = "step.continue"
    run_id: str
    step_id: str
    dispatch: DispatchId | None = None
    output: JsonValue = None
    wait: Wait | None = None
    journal_seq: int | None = None


@final
@attrs.frozen
class StepPaused:
    """The handler asked to be parked for ``duration_ms``: progress, not a failure or a crash."""

    TYPE: ClassVar[str] = "step.paused"
    run_id: str
    step_id: str
    dispatch: DispatchId | None = None
    duration_ms: int = 0
    journal_seq: int | None = None


@final
@attrs.frozen
class TimerFired:
    """A durable timer on ``SLEEP_TIMERS`` came due.

    ``kind`` is one of ``retry``, ``timeout``, ``loop_delay``, ``wait``, ``pause``,
    ``max_duration``; ``dispatch`` names the dispatch it was armed for, so a timer outlived by
    its dispatch is dropped.
    """

    TYPE: ClassVar[str] = "timer.fired"
    run_id: str
    step_id: str
    kind: str
    dispatch: DispatchId | None = None


@final
@attrs.frozen
class CancelRequested:
    TYPE: ClassVar[str] = "run.cancel_requested"
    run_id: str
    reason: str = "cancelled"


@final
@attrs.frozen
class InputSubmitted:
    """An input was queued for a step; wakes the step if it waits for input."""

    TYPE: ClassVar[str] = "input.submitted"
    run_id: str
    step_id: str
    request_id: str = ""


@final
@attrs.frozen
class ChildFinished:
    TYPE: ClassVar[str] = "child.finished"
    run_id: str
    step_id: str
    child_run_id: str
    status: str
    output: JsonValue = None
    error: str | None = None


@final
@attrs.frozen
class SignalSent:
    TYPE: ClassVar[str] = "run.signal"
    run_id: str
    name: str
    payload: JsonValue = None


RunEvent = (
    WorkflowStarted
    | StepCompleted
    | StepFailed
    | StepContinue
    | StepPaused
    | TimerFired
    | CancelRequested
    | InputSubmitted
    | ChildFinished
    | SignalSent
)

#: Events a worker publishes to settle a dispatch; they carry the dispatch identity.
LifecycleEvent = StepCompleted | StepFailed | StepContinue | StepPaused


def lifecycle_event(
    run_id: str,
    step_id: str,
    dispatch: DispatchId | None,
    action: CommitAction,
    *,
    output: JsonValue = None,
    wait: Wait | None = None,
    error: str | None = None,
    retriable: bool = True,
    reason: str | None = None,
    pause_ms: int | None = None,
    journal_seq: int | None = None,
) -> LifecycleEvent:
    """The one mapping from a settlement (a commit's action, or a plain step's) to its event, so
    the journal, the worker and the bridge cannot disagree on what a settlement publishes."""
    if action is CommitAction.CONTINUE:
        return StepContinue(
            run_id, step_id, dispatch, output=output, wait=wait, journal_seq=journal_seq
        )
    if action is CommitAction.COMPLETE:
        return StepCompleted(run_id, step_id, dispatch, output=output, journal_seq=journal_seq)
    if action is CommitAction.PAUSE:
        return StepPaused(
            run_id, step_id, dispatch, duration_ms=pause_ms or 0, journal_seq=journal_seq
        )
    return StepFailed(
        run_id,
        step_id,
        dispatch,
        error=error or "",
        retriable=retriable,
        reason=reason,
        journal_seq=journal_seq,
    )


register_union(RunEvent)


#: ``to_json(event, RunEvent)``, the hook looked up once (:func:`encoder_of`).
encode_event: Final[Callable[[RunEvent], bytes]] = encoder_of(RunEvent)


def decode_event(data: bytes) -> RunEvent:
    """Decode a history message; raises :class:`DecodeError` on anything malformed."""
    return from_json(data, RunEvent, "run event")
