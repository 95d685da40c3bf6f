"""The shapes the REST API reads and writes, as attrs classes.

Request bodies are decoded into these through the protocol converter (after a strict check in
:mod:`._rest_body`), and responses are built from them, so the OpenAPI document can be generated
from the same classes and cannot drift from what the handlers do. Engine snapshots are not sent
as they are: their outbox and embedded definition are internal, so a view picks what a client
needs.
"""

from __future__ import annotations

from typing import final

import attrs

from ..dag import Problem, WorkflowDef
from ..engine import RunSnapshot, StepState, StepStatus
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
class StepView:
    """One step. ``iteration`` and ``attempt`` are those of the current (or last) dispatch, None
    before the first; ``iterations`` counts finished iterations of a loop step."""

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
    that does not decode has ``record`` None and says why in ``error``."""

    seq: int
    type: str
    record: JsonValue
    error: str | None = None


@final
@attrs.frozen
class JournalPage:
    """``next`` goes back as ``from`` for the next page (the sequence after the last record)."""

    records: tuple[JournalEntry, ...]
    next: int


# --- building views --------------------------------------------------------------------------


def problem_views(problems: list[Problem]) -> tuple[ProblemView, ...]:
    return tuple(ProblemView(p.step, p.field, p.message) for p in problems)


def step_view(step: StepState) -> StepView:
    dispatch = step.dispatch
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
    )


def run_view(snap: RunSnapshot) -> RunView:
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
        steps=tuple(step_view(s) for s in snap.steps.values()),
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
