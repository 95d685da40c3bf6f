"""Purging a finished run: every message and key the run left in NATS, child runs included.

A run's traces are spread over six streams and five buckets (see ``protocol.layout``). Which
subjects and keys belong to a run follows from its snapshot alone (its steps, their task types,
its idempotency key, its sub-workflow children), so the plan is a pure function of the snapshot
(:func:`plan_purge`) and the shell (:func:`execute_plan`) only carries it out.

Resumability is the point of the order: the snapshot is what makes a run visible and what the
plan is computed from, so it is deleted last, and children are purged before their parent. A
purge interrupted anywhere leaves the snapshot of every run not yet fully purged, and running
it again recomputes the same plan and finishes the work; every step of a plan is idempotent
(purging an empty subject, deleting an absent key). Nothing scans a whole stream: each stream
subject is one ``purge_subject``; the keys named by step are read and deleted one by one; only
signals and inputs, whose names are not in the snapshot, are listed by the run's key prefix.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import attrs

from ..dag import StepType, WorkflowDef
from ..engine import RunSnapshot, child_run_id
from ..protocol import layout
from ..transport import RevisionMismatch, Transport

#: Levels of sub-workflow children followed below the run being purged.
PURGE_DEPTH_MAX = 8
#: Runs one purge removes at most (the run and all its descendants).
PURGE_RUNS_MAX = 1_000


@attrs.frozen
class StreamSubject:
    stream: str
    subject: str


@attrs.frozen
class BucketKey:
    bucket: str
    key: str


@attrs.frozen
class PurgePlan:
    """What one run left behind, in the order it is removed.

    ``keys`` are deleted when present; every key under each of ``prefixes`` is deleted;
    ``idempotency`` is deleted only while it still names this run (a purge re-run after the key
    was freed must not take it from a newer run); ``snapshot`` goes last.
    """

    run_id: str
    subjects: tuple[StreamSubject, ...]
    keys: tuple[BucketKey, ...]
    prefixes: tuple[BucketKey, ...]
    idempotency: BucketKey | None
    snapshot: BucketKey


@attrs.frozen
class PurgeTree:
    """The runs of one purge, children before parents (the root last).

    ``orphans`` are child run ids with no snapshot: already purged, or never started by the
    engine; only their history subject can hold anything. ``truncated`` is true when the tree
    is deeper than :data:`PURGE_DEPTH_MAX` or larger than :data:`PURGE_RUNS_MAX`.
    """

    runs: tuple[RunSnapshot, ...]
    orphans: tuple[str, ...]
    truncated: bool


def child_runs(snapshot: RunSnapshot) -> tuple[str, ...]:
    """Every child run a sub-workflow step of the run started: one per attempt."""
    definition = snapshot.definition
    found: list[str] = []
    for step_id, st in snapshot.steps.items():
        is_sub = False
        if definition is not None:
            try:
                is_sub = definition.step(step_id).type is StepType.SUB_WORKFLOW
            except KeyError:
                is_sub = False
        if is_sub and st.dispatch is not None:
            for attempt in range(1, st.dispatch.attempt + 1):
                found.append(child_run_id(snapshot.run_id, step_id, attempt))
        if st.child_run_id is not None:
            found.append(st.child_run_id)
    return tuple(dict.fromkeys(found))


def _index_subjects(run: str) -> tuple[StreamSubject, ...]:
    """The run's entry in the run index and its active marker (see ``engine._run_index``)."""
    return (
        StreamSubject(layout.RUN_INDEX_STREAM, layout.run_index_subject(run)),
        StreamSubject(layout.RUN_ACTIVE_STREAM, layout.run_active_subject(run)),
    )


def plan_purge(
    snapshot: RunSnapshot, definition: WorkflowDef | None, idempotency_kv_key: str | None
) -> PurgePlan:
    """The plan for one run. ``definition`` gives the task types (whose subjects hold leftover
    task messages); the snapshot's own is used first, this one only for snapshots without it."""
    run = snapshot.run_id
    definition = snapshot.definition or definition
    step_ids = list(snapshot.steps)
    if definition is not None:
        step_ids += [s.id for s in definition.steps if s.id not in snapshot.steps]
    task_types = sorted(
        {s.task for s in definition.steps if s.task and s.type is not StepType.SUB_WORKFLOW}
        if definition is not None
        else set()
    )
    subjects = [
        StreamSubject(layout.HISTORY_STREAM, layout.history_subject(run)),
        *_index_subjects(run),
    ]
    subjects += [StreamSubject(layout.TASK_STREAM, layout.task_subject(t, run)) for t in task_types]
    for sid in step_ids:
        subjects.append(StreamSubject(layout.TIMER_STREAM, layout.timer_subject(run, sid)))
        subjects.append(StreamSubject(layout.JOURNAL_STREAM, layout.journal_subject(run, sid)))
    keys = tuple(
        BucketKey(layout.CHECKPOINTS_BUCKET, layout.checkpoint_key(run, sid)) for sid in step_ids
    )
    # Run ids are single tokens, so "{run}." matches this run's keys and no other run's: the
    # signals, and the inputs (submissions ``{run}.{step}.{request}`` and indexes ``{run}.{step}``).
    prefixes = (
        BucketKey(layout.SIGNALS_BUCKET, f"{run}."),
        BucketKey(layout.INPUTS_BUCKET, f"{run}."),
    )
    idem = (
        BucketKey(layout.RUNS_BUCKET, idempotency_kv_key)
        if idempotency_kv_key is not None
        else None
    )
    return PurgePlan(
        run_id=run,
        subjects=tuple(subjects),
        keys=keys,
        prefixes=prefixes,
        idempotency=idem,
        snapshot=BucketKey(layout.RUNS_BUCKET, layout.run_key(run)),
    )


async def collect_tree(
    root: RunSnapshot, load: Callable[[str], Awaitable[RunSnapshot | None]]
) -> PurgeTree:
    """The root and its descendants, children first; ``load`` reads a snapshot (None: absent)."""
    ordered: list[RunSnapshot] = []
    orphans: list[str] = []
    seen = {root.run_id}
    truncated = False

    async def visit(snap: RunSnapshot, depth: int) -> None:
        nonlocal truncated
        for child_id in child_runs(snap):
            if child_id in seen:
                continue
            if depth >= PURGE_DEPTH_MAX or len(seen) >= PURGE_RUNS_MAX:
                truncated = True
                return
            seen.add(child_id)
            child = await load(child_id)
            if child is None:
                orphans.append(child_id)
                continue
            await visit(child, depth + 1)
        ordered.append(snap)

    await visit(root, 0)
    return PurgeTree(tuple(ordered), tuple(orphans), truncated)


async def execute_plan(transport: Transport, plan: PurgePlan) -> None:
    """Carry out ``plan``, snapshot last. Round trips: one per subject, one or two per named
    key, one listing and one delete per key for each prefix, two or three for the
    idempotency key, one for the snapshot."""
    for s in plan.subjects:
        await transport.purge_subject(s.stream, s.subject)
    for k in plan.keys:
        if await transport.kv_get(k.bucket, k.key) is not None:
            await transport.kv_delete(k.bucket, k.key)
    for p in plan.prefixes:
        for key in await transport.kv_keys(p.bucket, p.key):
            await transport.kv_delete(p.bucket, key)
    if plan.idempotency is not None:
        i = plan.idempotency
        entry = await transport.kv_get(i.bucket, i.key)
        if entry is not None and entry.value == plan.run_id.encode():
            # With the revision: a key freed and claimed again meanwhile is not ours to delete.
            with contextlib.suppress(RevisionMismatch):
                await transport.kv_delete(i.bucket, i.key, revision=entry.revision)
    await transport.kv_delete(plan.snapshot.bucket, plan.snapshot.key)


async def purge_orphan(transport: Transport, run_id: str) -> None:
    """A child run with no snapshot can only have its ``workflow.started`` (and a cancel) in
    history, and its index entry (written just before a snapshot that a crash prevented): the
    engine writes the snapshot before it dispatches anything."""
    await transport.purge_subject(layout.HISTORY_STREAM, layout.history_subject(run_id))
    for s in _index_subjects(run_id):
        await transport.purge_subject(s.stream, s.subject)
