"""Commits as the shell reports them: the lifecycle event a commit stands for, and the input
requests placed in the segment a commit ends.

Pure (no I/O, no clock, no randomness); the terms are those of :mod:`._replay`.
"""

from __future__ import annotations

from collections.abc import Sequence

from dagnats_trio.protocol import (
    CommitAction,
    CommitRecord,
    JournalRecord,
    LifecycleEvent,
    lifecycle_event,
)

from ._replay_claim import _placed
from ._replay_task import Entry, TaskIdentity

# ---------------------------------------------------------------------------------------------
# Commits and their lifecycle events.
# ---------------------------------------------------------------------------------------------


def event_for_commit(commit: CommitRecord, task: TaskIdentity, seq: int) -> LifecycleEvent:
    """The lifecycle event a commit stands for, carrying the dispatch and ``journal_seq``."""
    return lifecycle_event(
        task.run_id,
        task.step_id,
        task.dispatch,
        commit.action,
        output=commit.output,
        wait=commit.wait,
        error=commit.error,
        retriable=commit.retriable,
        reason=commit.reason,
        pause_ms=commit.pause_ms,
        journal_seq=seq,
    )


def placed_before(entries: Sequence[Entry], commit_seq: int, iteration: int) -> tuple[str, ...]:
    """Request ids placed in the segment that the commit at ``commit_seq`` ends."""
    seg: list[JournalRecord] = []
    for s, r in entries:
        if s >= commit_seq:
            break
        if r.iteration != iteration:
            continue
        if isinstance(r, CommitRecord) and r.action is CommitAction.PAUSE:
            seg = []
            continue
        seg.append(r)
    return tuple(p.request_id for p in _placed(seg))
