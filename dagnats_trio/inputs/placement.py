"""``tc.place_inputs(mode)``: claim queued inputs and record them in the journal.

The order of work is claim (compare-and-set ``queued -> placed`` in KV), then record
(``input.placed`` in the journal). The record is the truth about placement:

- a redelivery of the iteration first returns what earlier deliveries recorded, once each;
- an input the KV says is placed but that no record backs was claimed by a delivery that died (or
  was fenced) before recording it. It is recorded now rather than lost: by a later delivery of
  the same iteration, or by the next placement of its mode in any later iteration (which first
  moves the claim to itself). A settlement of the finished step that finds it still unrecorded
  makes it ``unanswered``: the agent never saw it (see ``_settlement`` for every final state);
- an input the KV says is placed and that a record of an earlier segment backs (its ``done`` was
  lost) is marked done, never recorded again;
- so no ``request_id`` is placed twice across redeliveries, attempts and iterations (the
  iteration's records cover deliveries and attempts; the journal read covers the rest, and the KV
  state never returns to ``queued``);
- a withdrawal that wins the compare-and-set is final: the claim fails and the input is skipped.

A claim of a later iteration than the caller's is left alone: the caller is a stale holder and its
own appends are fenced.
"""

from __future__ import annotations

import enum
from typing import Protocol, final

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


@final
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


@final
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
    ones. Costs one index read when nothing is queued; about three round trips per new input (and
    one read of the journal when a claim was left unrecorded).
    """
    recorded = journal.placed_inputs()
    recorded_ids = {r.request_id for r in recorded}
    out: list[PlacedInput] = []
    for record in recorded:
        if record.mode == mode.value and record.request_id not in state.returned:
            out.append(PlacedInput.from_record(record))
            state.returned.add(record.request_id)

    handled: list[str] = []
    repaired: list[str] = []
    scan = _JournalScan(service, journal.run_id, journal.step_id)
    candidates = await service.placement_candidates(journal.run_id, journal.step_id, mode)
    for candidate in candidates:
        verdict, sub = await _decide(journal, service, candidate, recorded_ids, scan)
        if verdict is _Verdict.RECORD:
            assert sub is not None
            record = InputPlacedRecord(
                iteration=journal.iteration,
                attempt=journal.attempt,
                claim_id=journal.claim_id,
                request_id=sub.request_id,
                mode=sub.mode.value,
                content=sub.content,
            )
            await journal.append(record)
            recorded_ids.add(sub.request_id)
            state.returned.add(sub.request_id)
            out.append(PlacedInput.from_record(record))
        elif verdict is _Verdict.MARK_DONE:
            repaired.append(candidate.submission.request_id)
        if verdict is not _Verdict.LEAVE:
            handled.append(candidate.submission.request_id)
    if repaired:
        await service.mark_done(journal.run_id, journal.step_id, repaired)
    await service.drop_from_index(journal.run_id, journal.step_id, handled)
    return out


class _Verdict(enum.Enum):
    RECORD = "record"  # claimed (or adopted) by this delivery: record it now
    SKIP = "skip"  # settled, or recorded by this iteration already
    MARK_DONE = "mark_done"  # recorded by a committed segment whose ``done`` was lost
    LEAVE = "leave"  # claimed by a later iteration: not ours to touch, stays indexed


class _JournalScan:
    """The step's recorded placements, read at most once per call and only when needed."""

    def __init__(self, service: InputsService, run_id: str, step_id: str) -> None:
        self._service = service
        self._run_id = run_id
        self._step_id = step_id
        self._found: dict[str, int] | None = None

    async def recorded(self, request_id: str) -> bool:
        if self._found is None:
            placements = await self._service.journal_placements(self._run_id, self._step_id)
            self._found = placements.recorded
        return request_id in self._found


async def _decide(
    journal: JournalWriter,
    service: InputsService,
    candidate: StoredSubmission,
    recorded_ids: set[str],
    scan: _JournalScan,
) -> tuple[_Verdict, Submission | None]:
    """What this delivery does with one indexed submission (claims and adoptions happen here)."""
    current: StoredSubmission | None = candidate
    for _ in range(MAX_CAS_ATTEMPTS):
        if current is None:
            return _Verdict.SKIP, None
        sub = current.submission
        if sub.request_id in recorded_ids:
            return _Verdict.SKIP, None
        if sub.status is SubmissionStatus.QUEUED:
            claimed = await service.claim(current, journal.iteration)
            if claimed is not None:
                return _Verdict.RECORD, claimed.submission
            current = await service.reread(sub)
            continue
        if sub.status is not SubmissionStatus.PLACED:
            return _Verdict.SKIP, None  # withdrawn, unanswered or done: settled first
        claimed_by = sub.placed_iteration if sub.placed_iteration is not None else -1
        if claimed_by > journal.iteration:
            return _Verdict.LEAVE, None
        # Placed but not in this iteration's segment: recorded by an earlier, committed segment
        # (its done was lost), or never recorded (its holder died between claim and record).
        if await scan.recorded(sub.request_id):
            return _Verdict.MARK_DONE, None
        if claimed_by == journal.iteration:
            return _Verdict.RECORD, sub
        adopted = await service.adopt(current, journal.iteration)
        if adopted is not None:
            return _Verdict.RECORD, adopted.submission
        current = await service.reread(sub)
    raise ContentionError(f"input {candidate.submission.request_id!r} kept changing")
