"""What :func:`.core.advance` takes and gives, and the names the engine gives things: the
context (clock, ids, definition), the outcome, timer kinds, failure reasons, child run and timer
ids. Pure: no I/O; the clock and the id source come in through :class:`AdvanceContext`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Final, final

import attrs

from ..dag import WorkflowDef
from ..protocol import ID_MAX_CHARS, DispatchId, check_id
from .effects import Effect
from .snapshot import RunSnapshot

# Timer kinds (``TimerFired.kind``).
TIMER_RETRY = "retry"
TIMER_TIMEOUT = "timeout"
TIMER_LOOP_DELAY = "loop_delay"
TIMER_WAIT = "wait"
TIMER_PAUSE = "pause"
TIMER_MAX_DURATION = "max_duration"

# Failure reasons the engine itself sets on a step.
REASON_TIMEOUT = "timeout"
REASON_MAX_ITERATIONS = "max_iterations"
REASON_MAX_DURATION = "max_duration"
REASON_CHILD_FAILED = "child_failed"
REASON_NOT_A_LOOP = "not_a_loop"
#: The run's snapshot with the event applied would be over the bound a snapshot may be stored
#: at (:func:`.core.fail_too_large`): the run fails instead of retrying the save forever.
REASON_SNAPSHOT_TOO_LARGE = "snapshot_too_large"

#: Longest token a run id may be (see :func:`protocol.check_id`).
MAX_RUN_ID_CHARS = ID_MAX_CHARS

#: The outbox sequence of a start the service decided itself (:func:`.core.first_dispatch`),
#: before its ``workflow.started`` had a history sequence: no stream sequence is 0, so no
#: delivery's ``seq`` ever matches it by accident (:func:`.core.service_start_entry` does).
SERVICE_START_SEQ: Final = 0


def started_msg_id(run_id: str) -> str:
    """The msg id of a run's ``workflow.started``, whoever publishes it (the service, a retry
    of its start, a parent's engine for a child): the history stream stores one."""
    return f"{run_id}.started"


@final
@attrs.frozen
class AdvanceContext:
    """What :func:`advance` may know beyond the snapshot and the event.

    ``definition`` is needed only when ``workflow.started`` arrives for a run with no snapshot;
    ``seq`` is the history stream sequence of the event (None when it has none, e.g. in tests).
    ``outbox_stored`` says that the effects of the snapshot's newest outbox entry are stored
    (the engine stored them after saving it, then kept the snapshot): the new snapshot keeps
    that entry's sequence only (``snapshot.stored_outbox``).
    """

    now_ms: int
    new_id: Callable[[], str]
    definition: WorkflowDef | None = None
    legacy_step_events: bool = True
    seq: int | None = None
    outbox_stored: bool = False


@final
@attrs.frozen
class Outcome:
    """The result of one decision. ``dropped`` names why an event was ignored; ``replayed`` is
    true when the event had already been applied and its stored effects are returned again.
    ``snapshot`` None means the run does not exist (or has not started): retry the event later."""

    snapshot: RunSnapshot | None
    effects: tuple[Effect, ...] = ()
    dropped: str | None = None
    replayed: bool = False


def child_run_id(parent_run: str, step_id: str, attempt: int) -> str:
    """The run id of a ``sub_workflow`` step's child: the same for every engine and every
    redelivery, and a new one per attempt."""
    plain = f"{parent_run}-{step_id}-{attempt}"
    if len(plain) <= MAX_RUN_ID_CHARS:
        return plain
    digest = hashlib.sha256(plain.encode()).hexdigest()[:40]
    return check_id("run_id", f"c{attempt}-{digest}")


def timer_id(run_id: str, step_id: str, kind: str, dispatch: DispatchId) -> str:
    return f"{run_id}.{step_id}.{kind}.{dispatch.nonce}"
