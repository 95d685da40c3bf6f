"""The per-step index: submission order and the queued set, in one small KV value.

Submissions stay in KV while their step lives and for the seven-day dedupe window after they
finish, whatever their state, so scanning a
step's keys to find the queued ones would grow with history. The index keeps, per step, the next
order number, the request ids that may still be queued (in submission order) and whether the step
is closed to new inputs. It is updated by compare-and-set like everything else; the submission
record stays the truth and the index may lag it (an entry whose record is no longer queued is
stale and dropped when seen; an entry whose record does not exist yet is a submission in flight).
"""

from __future__ import annotations

import attrs

from .errors import ConflictError
from .submission import Mode

#: Bound on entries in one step's index, so the index stays a small KV value.
MAX_QUEUED_PER_STEP = 1000


@attrs.frozen
class IndexEntry:
    request_id: str
    mode: Mode
    order: int


@attrs.frozen
class StepIndex:
    next_order: int = 0
    closed: bool = False
    queued: tuple[IndexEntry, ...] = ()

    def entry(self, request_id: str) -> IndexEntry | None:
        for e in self.queued:
            if e.request_id == request_id:
                return e
        return None


def with_submission(index: StepIndex, request_id: str, mode: Mode) -> tuple[StepIndex, int]:
    """Append ``request_id``; return the new index and the submission's order.

    An id already present (a submission whose record was never written, retried) keeps its
    place.
    """
    if index.closed:
        raise ConflictError("the step has finished and takes no more inputs", code="step_finished")
    existing = index.entry(request_id)
    if existing is not None:
        return index, existing.order
    if len(index.queued) >= MAX_QUEUED_PER_STEP:
        raise ConflictError(
            f"the step already has {MAX_QUEUED_PER_STEP} queued inputs", code="queue_full"
        )
    order = index.next_order
    entry = IndexEntry(request_id=request_id, mode=mode, order=order)
    return attrs.evolve(index, next_order=order + 1, queued=(*index.queued, entry)), order


def without(index: StepIndex, request_ids: frozenset[str]) -> StepIndex:
    return attrs.evolve(
        index, queued=tuple(e for e in index.queued if e.request_id not in request_ids)
    )


def closed(index: StepIndex) -> StepIndex:
    """Closed to new inputs. The entries stay until settlement has settled them and drops them,
    so a settlement repeated after a crash still finds what it has to settle."""
    return attrs.evolve(index, closed=True)
