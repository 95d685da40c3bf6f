"""Where a finished step's submissions end, decided from its journal: a pure core.

When a step reaches a final state (completed, failed, cancelled, timed out), every submission of
it that is not settled yet is settled here, and the journal is the truth:

- ``queued``: never placed, so ``unanswered`` (the step finished before it was placed);
- ``placed`` and its ``input.placed`` record is followed by a commit of the same iteration that
  is not a failure (``continue``, ``complete``, or the ``pause`` that closed its segment): the
  iteration that placed it committed, so ``done``, even when the worker's own marking was lost;
- ``placed`` with a record but no such commit (the iteration failed for good, was cancelled or
  timed out): the agent saw it, but nothing it did with it was kept, so ``unanswered`` with its
  ``placed_iteration`` kept;
- ``placed`` with no record at all (its holder died between the claim and the record):
  ``unanswered`` with no ``placed_iteration``, the agent never saw it.

Applying :func:`settle_finished` twice gives the same result, so the engine may repeat the
settlement after a crash. No I/O here: the service reads the journal and the store and applies
these functions by compare-and-set.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from dagnats_trio.protocol import CommitAction, CommitRecord, InputPlacedRecord, JournalRecord

from .submission import (
    Submission,
    SubmissionStatus,
    to_done,
    to_unanswered,
    to_unanswered_placed,
    to_unanswered_unrecorded,
)


@attrs.frozen
class JournalPlacements:
    """What a step's journal says about its placements.

    ``recorded``: request id -> iteration of its first ``input.placed`` record; ``committed``:
    the request ids whose record a later non-failure commit of the same iteration follows.
    """

    recorded: dict[str, int] = attrs.field(factory=dict)
    committed: frozenset[str] = frozenset()


def journal_placements(records: Iterable[JournalRecord]) -> JournalPlacements:
    """Fold a step's journal records, in journal order, into :class:`JournalPlacements`."""
    recorded: dict[str, int] = {}
    open_by_iteration: dict[int, set[str]] = {}
    committed: set[str] = set()
    for record in records:
        if isinstance(record, InputPlacedRecord):
            if record.request_id not in recorded:
                recorded[record.request_id] = record.iteration
                open_by_iteration.setdefault(record.iteration, set()).add(record.request_id)
        elif isinstance(record, CommitRecord) and record.action is not CommitAction.FAIL:
            committed |= open_by_iteration.pop(record.iteration, set())
    return JournalPlacements(recorded, frozenset(committed))


def settle_finished(sub: Submission, journal: JournalPlacements, now_ms: int) -> Submission:
    """The final state of ``sub`` once its step finished (``sub`` itself when already settled)."""
    if sub.status.settled:
        return sub
    if sub.status is SubmissionStatus.QUEUED:
        return to_unanswered(sub, now_ms)
    if sub.request_id in journal.committed:
        return to_done(sub, now_ms)
    if sub.request_id in journal.recorded:
        return to_unanswered_placed(sub, now_ms)
    return to_unanswered_unrecorded(sub, now_ms)
