"""``tc.place_inputs(mode)``: claim queued inputs and record them in the journal.

The order of work is claim (compare-and-set ``queued -> placed`` in KV), then record
(``input.placed`` in the journal). The record is the truth about placement:

- a redelivery of the iteration first returns what earlier deliveries recorded, once each;
- an input the KV says is placed by *this* iteration but that has no record was claimed by a
  delivery that died (or was fenced) before recording it: it is ours, so it is recorded now rather
  than lost;
- an input placed by another iteration, or settled, is never recorded again, so no ``request_id``
  is placed twice across redeliveries, attempts and iterations (the iteration's records cover
  deliveries and attempts; the KV state, which never returns to ``queued``, covers iterations);
- a withdrawal that wins the compare-and-set is final: the claim fails and the input is skipped.

Known gap: a claim whose delivery died is adopted only by a later delivery of the same iteration
that calls ``place_inputs`` with the same mode; a handler that stops asking leaves it ``placed``.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from dagnats_trio.protocol import InputPlacedRecord, JournalRecord, JsonValue

from .errors import ContentionError
from .service import MAX_CAS_ATTEMPTS, InputsService, StoredSubmission
from .submission import Mode, Submission, SubmissionStatus


class JournalWriter(Protocol):
    """What placement needs from the journal handle (the journal satisfies it structurally)."""

    @property
    def run_id(self) -> str: ...
    @property
    def step_id(self) -> str: ...
    @property
    def iteration(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def claim_id(self) -> str: ...

    def placed_inputs(self) -> list[InputPlacedRecord]:
        """input.placed records already in the journal for this iteration (all deliveries)."""

    async def append(self, record: JournalRecord) -> int:
        """Fenced append (raises the journal's Fenced error if the writer lost the tail)."""


@attrs.frozen
class PlacedInput:
    """An input handed to the handler; ``content`` comes from the journal record."""

    request_id: str
    mode: Mode
    content: JsonValue
    iteration: int

    @classmethod
    def from_record(cls, record: InputPlacedRecord) -> PlacedInput:
        return cls(
            request_id=record.request_id,
            mode=Mode(record.mode),
            content=record.content,
            iteration=record.iteration,
        )


@attrs.define
class PlacementState:
    """What one delivery has already returned; the TaskContext keeps one per delivery."""

    returned: set[str] = attrs.field(factory=set)


async def place_inputs(
    journal: JournalWriter,
    service: InputsService,
    mode: Mode,
    *,
    state: PlacementState,
) -> list[PlacedInput]:
    """Place the queued inputs of ``mode`` for the journal's iteration, in submission order.

    Returns earlier placements of this iteration this delivery has not returned yet, then the new
    ones. Costs one index read when nothing is queued; about three round trips per new input.
    """
    recorded = journal.placed_inputs()
    recorded_ids = {r.request_id for r in recorded}
    out: list[PlacedInput] = []
    for record in recorded:
        if record.mode == mode.value and record.request_id not in state.returned:
            out.append(PlacedInput.from_record(record))
            state.returned.add(record.request_id)

    handled: list[str] = []
    candidates = await service.placement_candidates(journal.run_id, journal.step_id, mode)
    for candidate in candidates:
        mine = await _claim_or_adopt(journal, service, candidate, recorded_ids)
        if mine is not None:
            record = InputPlacedRecord(
                iteration=journal.iteration,
                attempt=journal.attempt,
                claim_id=journal.claim_id,
                request_id=mine.request_id,
                mode=mine.mode.value,
                content=mine.content,
            )
            await journal.append(record)
            recorded_ids.add(mine.request_id)
            state.returned.add(mine.request_id)
            out.append(PlacedInput.from_record(record))
        handled.append(candidate.submission.request_id)
    await service.drop_from_index(journal.run_id, journal.step_id, handled)
    return out


async def _claim_or_adopt(
    journal: JournalWriter,
    service: InputsService,
    candidate: StoredSubmission,
    recorded_ids: set[str],
) -> Submission | None:
    """The submission if this delivery must record it now, else None."""
    current: StoredSubmission | None = candidate
    for _ in range(MAX_CAS_ATTEMPTS):
        if current is None:
            return None
        sub = current.submission
        if sub.request_id in recorded_ids:
            return None
        if sub.status is SubmissionStatus.PLACED:
            # Claimed by this iteration but not recorded: a delivery died between the two.
            return sub if sub.placed_iteration == journal.iteration else None
        if sub.status is not SubmissionStatus.QUEUED:
            return None  # withdrawn, unanswered or done: someone else settled it first
        claimed = await service.claim(current, journal.iteration)
        if claimed is not None:
            return claimed.submission
        current = await service.reread(sub)
    raise ContentionError(f"input {candidate.submission.request_id!r} kept changing")
