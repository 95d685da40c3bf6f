"""Which running steps wait on a task type no worker has polled for a while.

Workers leave a mark per task type every few seconds (``worker._polls``); a step dispatched at
least :data:`UNSERVED_AFTER_S` ago whose type has no mark that recent is waiting for a worker
that is not there (never started, or gone). The run's view says so (``StepView.no_worker``),
so ``dagnats run get`` and the console stop showing a plain ``running`` that will never move.

The reading costs one KV get per distinct task type of the run's running steps, only when a run
is read; nothing on the dispatch or fetch path. Worker and reader clocks are compared, so a skew
between hosts shifts the verdict by that much; the bound is large next to any sane skew.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..dag import StepType
from ..engine import RunSnapshot, StepStatus
from ..protocol import DecodeError, decode_poll_mark
from ..protocol.layout import WORKER_POLLS_BUCKET, worker_poll_key
from ..transport import NotProvisioned, Transport
from ._rest_views import NoWorker

#: A dispatched step whose task type no worker has polled for this long is said to be unserved.
UNSERVED_AFTER_S: Final = 30.0


def waiting_task_types(snap: RunSnapshot) -> dict[str, str]:
    """``step id -> task type`` of the run's steps that wait on a worker (dispatched tasks,
    not child runs)."""
    if snap.definition is None or snap.status.finished:
        return {}
    out: dict[str, str] = {}
    for step in snap.definition.steps:
        state = snap.steps.get(step.id)
        if (
            state is not None
            and state.status is StepStatus.RUNNING
            and step.type is not StepType.SUB_WORKFLOW
            and step.task
        ):
            out[step.id] = step.task
    return out


def no_worker_verdict(
    task_type: str,
    last_polled_at_ms: int | None,
    waiting_since_ms: int | None,
    now_ms: int,
    after_s: float,
) -> NoWorker | None:
    """Pure: the hint for a step waiting since ``waiting_since_ms`` on ``task_type``, last
    polled at ``last_polled_at_ms`` (None: no mark), or None while a worker may still come."""
    after_ms = int(after_s * 1000)
    if waiting_since_ms is not None and now_ms - waiting_since_ms < after_ms:
        return None
    if last_polled_at_ms is not None and now_ms - last_polled_at_ms < after_ms:
        return None
    if last_polled_at_ms is None:
        message = f"no worker has polled task type {task_type!r} (none seen)"
    else:
        idle_s = (now_ms - last_polled_at_ms) // 1000
        message = f"no worker has polled task type {task_type!r} for {idle_s} s"
    return NoWorker(task_type=task_type, last_polled_at_ms=last_polled_at_ms, message=message)


async def last_polls(transport: Transport, task_types: set[str]) -> dict[str, int | None] | None:
    """When each type was last polled (None: no mark); None when the store has no marks bucket
    (provisioned before it existed), where no verdict can be given."""
    out: dict[str, int | None] = {}
    for task_type in sorted(task_types):
        try:
            entry = await transport.kv_get(WORKER_POLLS_BUCKET, worker_poll_key(task_type))
        except NotProvisioned:
            return None
        at_ms: int | None = None
        if entry is not None and entry.value is not None:
            try:
                at_ms = decode_poll_mark(entry.value).at_ms
            except DecodeError:
                at_ms = None
        out[task_type] = at_ms
    return out


async def unserved_steps(
    transport: Transport, snap: RunSnapshot, now_ms: int, after_s: float
) -> Mapping[str, NoWorker]:
    """``step id -> hint`` for the run's steps waiting on a task type nobody polls."""
    waiting = waiting_task_types(snap)
    if not waiting:
        return {}
    polls = await last_polls(transport, set(waiting.values()))
    if polls is None:
        return {}
    out: dict[str, NoWorker] = {}
    for step_id, task_type in waiting.items():
        state = snap.steps[step_id]
        since = (
            state.dispatched_at_ms if state.dispatched_at_ms is not None else state.started_at_ms
        )
        verdict = no_worker_verdict(task_type, polls[task_type], since, now_ms, after_s)
        if verdict is not None:
            out[step_id] = verdict
    return out


__all__ = [
    "UNSERVED_AFTER_S",
    "last_polls",
    "no_worker_verdict",
    "unserved_steps",
    "waiting_task_types",
]
