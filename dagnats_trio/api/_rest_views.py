"""The shapes the REST API reads and writes, as attrs classes.

Request bodies are decoded into these through the protocol converter (after a strict check in
:mod:`._rest_body`), and responses are built from them, so the OpenAPI document can be generated
from the same classes and cannot drift from what the handlers do. Engine snapshots are not sent
as they are: their outbox and embedded definition are internal, so a view picks what a client
needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import final

import attrs

from ..dag import Problem, WorkflowDef
from ..engine import Park, RunSnapshot, StepState, StepStatus
from ..protocol import JsonValue, RunStatus
from ..web import ProblemView

# --- request bodies --------------------------------------------------------------------------


@attrs.frozen
class StartRunBody:
    """``idempotency_key``: the same key returns the run it started first."""

    workflow: str
    input: JsonValue = None
    idempotency_key: str | None = None


@attrs.frozen
class CancelBody:
    reason: str = "cancelled"


@attrs.frozen
class SignalBody:
    payload: JsonValue = None


@attrs.frozen
class SubmitInputBody:
    """``mode`` is ``steer`` or ``follow_up``; ``content`` is any JSON value."""

    request_id: str
    mode: str
    content: JsonValue


# --- responses -------------------------------------------------------------------------------


@attrs.frozen
class PreviewChunk:
    """One ``put_stream`` chunk: ``text`` when it is UTF-8, else ``base64`` of its bytes."""

    text: str | None = None
    base64: str | None = None


#: How long ``/healthz`` waits for NATS to answer before it reports NATS down.
HEALTH_NATS_TIMEOUT_S = 2.0


@attrs.frozen
class Health:
    """``status`` is ``ok`` when the process serves and NATS (JetStream) answers, ``unavailable``
    when NATS does not; ``nats`` says which: ``up`` or ``down``."""

    status: str = "ok"
    nats: str = "up"


@final
@attrs.frozen
class WorkflowList:
    workflows: tuple[WorkflowDef, ...]


@final
@attrs.frozen
class RunStarted:
    run_id: str


@final
@attrs.frozen
class NoWorker:
    """A running step's task type has not been polled by any worker for a while (the API's
    ``UNSERVED_AFTER_S``, 30 s): the run will not move until a worker for ``task_type`` starts.
    ``last_polled_at_ms`` is when one last did (epoch ms; None: none seen)."""

    task_type: str
    last_polled_at_ms: int | None
    message: str


@final
@attrs.frozen
class StepView:
    """One step. ``iteration`` and ``attempt`` are those of the current (or last) dispatch, None
    before the first; ``iterations`` counts finished iterations of a loop step.

    The timers of an unfinished step (epoch ms, None when not armed): a waiting step says why
    it waits (``waiting_for``: retry, loop_delay, wait, pause), when its wake-up timer fires
    (``wake_at_ms``) and whether an input wakes it sooner (``wakes_on_input``); the step
    timeout (``timeout_at_ms``) and a loop's ``max_duration`` (``max_duration_at_ms``) keep
    counting while it waits. ``no_worker`` is set on a running step that waits on a task
    type no worker polls."""

    step_id: str
    status: StepStatus
    iteration: int | None
    attempt: int | None
    iterations: int
    output: JsonValue
    error: str | None
    reason: str | None
    child_run_id: str | None
    started_at_ms: int | None
    finished_at_ms: int | None
    waiting_for: Park | None = None
    wake_at_ms: int | None = None
    wakes_on_input: bool = False
    timeout_at_ms: int | None = None
    max_duration_at_ms: int | None = None
    no_worker: NoWorker | None = None


@final
@attrs.frozen
class RunView:
    run_id: str
    workflow: str
    status: RunStatus
    input: JsonValue
    output: JsonValue
    error: str | None
    failed_step: str | None
    idempotency_key: str | None
    created_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None
    steps: tuple[StepView, ...]


@final
@attrs.frozen
class RunSummary:
    run_id: str
    workflow: str
    status: RunStatus
    error: str | None
    created_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None


@final
@attrs.frozen
class RunList:
    """Runs newest first. ``next_cursor`` goes back as ``cursor`` (with the same filters) for the
    next, older page; None on the last page. A filtered page may hold fewer runs than asked
    while ``next_cursor`` is set: one request examines a bounded number of runs."""

    runs: tuple[RunSummary, ...]
    next_cursor: str | None


@attrs.frozen
class SignalAccepted:
    run_id: str
    name: str


@final
@attrs.frozen
class JournalEntry:
    """One journal record. ``record`` is the decoded body (its ``type`` names the kind); a body
    that does not decode has ``record`` None and says why in ``error``. ``seq`` is the sequence
    of the message holding it: records stored together as one message share it. ``batch`` is
    ``k/n`` for a record stored as the k-th of an atomic batch of n (None: stored alone or in
    one message)."""

    seq: int
    type: str
    record: JsonValue
    error: str | None = None
    batch: str | None = None


@final
@attrs.frozen
class JournalPage:
    """``next`` goes back as ``from`` for the next page (the sequence after the last record)."""

    records: tuple[JournalEntry, ...]
    next: int


# --- building views --------------------------------------------------------------------------


#: Problems an invalid workflow's 400 lists; the rest are counted in one more. A definition
#: of 60,000 unknown keys (1 MB) was answered with 6.5 MB of problems (found from outside).
PROBLEMS_LISTED_MAX = 100


def problem_views(problems: list[Problem]) -> tuple[ProblemView, ...]:
    listed = tuple(ProblemView(p.step, p.field, p.message) for p in problems[:PROBLEMS_LISTED_MAX])
    more = len(problems) - len(listed)
    if more <= 0:
        return listed
    return (*listed, ProblemView(None, "(document)", f"{more} more problems not listed"))


def _due(armed: bool, since_ms: int | None, after_ms: int | None) -> int | None:
    if not armed or since_ms is None or after_ms is None:
        return None
    return since_ms + after_ms


def step_view(
    step: StepState,
    definition: WorkflowDef | None = None,
    no_worker: NoWorker | None = None,
) -> StepView:
    dispatch = step.dispatch
    sdef = None
    if definition is not None:
        with contextlib.suppress(KeyError):
            sdef = definition.step(step.step_id)
    live = dispatch is not None and not step.status.finished
    waiting = step.status is StepStatus.WAITING
    timeout = sdef.timeout if sdef is not None else None
    loop = sdef.agent_loop if sdef is not None else None
    max_duration = loop.max_duration if loop is not None else None
    dispatched = step.dispatched_at_ms
    return StepView(
        step_id=step.step_id,
        status=step.status,
        iteration=dispatch.iteration if dispatch is not None else None,
        attempt=dispatch.attempt if dispatch is not None else None,
        iterations=step.iterations,
        output=step.output,
        error=step.error,
        reason=step.reason,
        child_run_id=step.child_run_id,
        started_at_ms=step.started_at_ms,
        finished_at_ms=step.finished_at_ms,
        waiting_for=step.park if waiting else None,
        wake_at_ms=step.wake_at_ms if waiting else None,
        wakes_on_input=waiting and step.wait is not None and step.wait.until_input,
        timeout_at_ms=_due(live, dispatched, timeout),
        max_duration_at_ms=_due(live, step.started_at_ms, max_duration),
        no_worker=no_worker,
    )


def run_view(snap: RunSnapshot, unserved: Mapping[str, NoWorker] | None = None) -> RunView:
    """The run as the API shows it; ``unserved`` (``Service.unserved_steps``) adds the
    no-worker hints."""
    hints = unserved or {}
    return RunView(
        run_id=snap.run_id,
        workflow=snap.workflow,
        status=snap.status,
        input=snap.input,
        output=snap.output,
        error=snap.error,
        failed_step=snap.failed_step,
        idempotency_key=snap.idempotency_key,
        created_at_ms=snap.created_at_ms,
        updated_at_ms=snap.updated_at_ms,
        finished_at_ms=snap.finished_at_ms,
        steps=tuple(
            step_view(s, snap.definition, hints.get(s.step_id)) for s in snap.steps.values()
        ),
    )


def run_summary(snap: RunSnapshot) -> RunSummary:
    return RunSummary(
        run_id=snap.run_id,
        workflow=snap.workflow,
        status=snap.status,
        error=snap.error,
        created_at_ms=snap.created_at_ms,
        updated_at_ms=snap.updated_at_ms,
        finished_at_ms=snap.finished_at_ms,
    )
