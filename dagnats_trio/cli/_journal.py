"""Reading a journal as a person does: the timeline, and the audit of a whole run.

The timeline is a pure function over decoded records. What it marks comes from the records
alone: a second claim of the same iteration and attempt is a new holder that recovered the
delivery, and every model response or tool result the earlier holder recorded before it was
reused by the new one (a recovery within an attempt never asks again); an interrupted result is
an intent whose holder died before recording what happened.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence

import attrs

from ..api import JournalEntry, RunView
from ..engine import StepStatus
from ..journal import CheckReport, Unreadable, check
from ..protocol import (
    ClaimRecord,
    CommitRecord,
    DecodeError,
    InputPlacedRecord,
    JournalRecord,
    JsonValue,
    ModelRecord,
    Replay,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
    from_obj,
)
from ._client import ApiClient

#: Characters of a JSON value shown in one timeline cell.
DETAIL_MAX_CHARS = 72


class Mark(enum.Enum):
    NONE = ""
    RECOVERED = "recovered"
    REUSED = "reused"
    INTERRUPTED = "interrupted"
    INPUT = "input"
    RETRY = "retry"


@attrs.frozen
class TimelineRow:
    seq: int
    iteration: int
    attempt: int
    type: str
    call: int | None
    detail: str
    mark: Mark = Mark.NONE


def short(value: JsonValue, limit: int = DETAIL_MAX_CHARS) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decode_entries(
    entries: Sequence[JournalEntry],
) -> tuple[list[tuple[int, JournalRecord]], list[Unreadable]]:
    """Records in order, and each entry that did not decode (a violation for the audit)."""
    records: list[tuple[int, JournalRecord]] = []
    problems: list[Unreadable] = []
    for entry in entries:
        if entry.record is None:
            problems.append(
                Unreadable(entry.seq, f"{entry.type} record does not decode: {entry.error}")
            )
            continue
        try:
            records.append((entry.seq, from_obj(entry.record, JournalRecord, "journal record")))
        except DecodeError as exc:
            problems.append(Unreadable(entry.seq, str(exc)))
    return records, problems


def timeline(records: Sequence[tuple[int, JournalRecord]]) -> list[TimelineRow]:
    claims: dict[tuple[int, int], list[int]] = {}
    claim_of: dict[str, tuple[int, int]] = {}
    for seq, rec in records:
        if isinstance(rec, ClaimRecord):
            claims.setdefault((rec.iteration, rec.attempt), []).append(seq)
            claim_of[rec.claim_id] = (rec.iteration, rec.attempt)
    replay_of: dict[tuple[int, int, int], Replay] = {}
    rows: list[TimelineRow] = []
    for seq, rec in records:
        ia = (rec.iteration, rec.attempt)
        later_claim = any(c > seq for c in claims.get(ia, ()))
        if isinstance(rec, ClaimRecord):
            earlier = [c for c in claims[ia] if c < seq]
            if earlier:
                detail = f"a new holder recovered attempt {rec.attempt} (claim seq {earlier[-1]})"
                mark = Mark.RECOVERED
            elif rec.attempt > 1:
                detail, mark = f"attempt {rec.attempt} (a retry)", Mark.RETRY
            else:
                detail, mark = f"attempt {rec.attempt}", Mark.NONE
            rows.append(TimelineRow(seq, rec.iteration, rec.attempt, rec.TYPE, None, detail, mark))
        elif isinstance(rec, ModelRecord):
            mark = Mark.REUSED if later_claim else Mark.NONE
            rows.append(
                TimelineRow(
                    seq, rec.iteration, rec.attempt, rec.TYPE, rec.call, short(rec.response), mark
                )
            )
        elif isinstance(rec, ToolIntentRecord):
            replay_of[(rec.iteration, rec.attempt, rec.call)] = rec.replay
            detail = f"{rec.name}({short(rec.input, 40)}) {rec.replay.value}"
            if rec.group is not None:
                size = rec.group_size or 0
                detail += f" [parallel {rec.call - rec.group + 1}/{size}]"
            rows.append(TimelineRow(seq, rec.iteration, rec.attempt, rec.TYPE, rec.call, detail))
        elif isinstance(rec, ToolOutputRecord):
            rows.append(
                TimelineRow(seq, rec.iteration, rec.attempt, rec.TYPE, rec.call, short(rec.chunk))
            )
        elif isinstance(rec, ToolResultRecord):
            if rec.interrupted:
                replay = replay_of.get((rec.iteration, rec.attempt, rec.call))
                why = "unsafe, so not run again" if replay is Replay.UNSAFE else "not rerun"
                detail = f"its holder died mid-call; {why}; the model sees the interruption"
                if rec.cancelled_by is not None:
                    detail = f"cancelled: call {rec.cancelled_by} of its parallel group failed"
                if rec.partial:
                    detail += f"; partial {short(rec.partial, 30)}"
                mark = Mark.INTERRUPTED
            else:
                detail = f"error: {rec.error}" if rec.error else short(rec.output)
                mark = Mark.REUSED if later_claim else Mark.NONE
            rows.append(
                TimelineRow(seq, rec.iteration, rec.attempt, rec.TYPE, rec.call, detail, mark)
            )
        elif isinstance(rec, InputPlacedRecord):
            detail = f"{rec.mode} {rec.request_id}: {short(rec.content, 48)}"
            rows.append(
                TimelineRow(seq, rec.iteration, rec.attempt, rec.TYPE, None, detail, Mark.INPUT)
            )
        else:
            rows.append(
                TimelineRow(seq, rec.iteration, rec.attempt, rec.TYPE, None, _commit_detail(rec))
            )
    return rows


def _commit_detail(rec: CommitRecord) -> str:
    parts = [rec.action.value]
    if rec.wait is not None:
        parts.append("then wait")
    if rec.output is not None:
        parts.append(f"output {short(rec.output, 40)}")
    if rec.error:
        parts.append(f"error {rec.error}")
    if rec.reason:
        parts.append(f"reason {rec.reason}")
    return ", ".join(parts)


# --- the audit of a run, through the API ----------------------------------------------------


@attrs.frozen
class StepCheck:
    """The audit of one journal step. ``compared_iterations`` is False while the step runs (the
    engine may not have applied the event of a stored commit yet, so the count is not compared).
    """

    step_id: str
    report: CheckReport
    compared_iterations: bool

    @property
    def ok(self) -> bool:
        return self.report.ok


@attrs.frozen
class RunCheck:
    run: RunView
    steps: tuple[StepCheck, ...]

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps)


async def check_run(api: ApiClient, run_id: str) -> RunCheck:
    """Read the run and the journal of each step that has one, and audit each journal."""
    run = await api.get_run(run_id)
    out: list[StepCheck] = []
    for step in run.steps:
        entries = await api.journal_all(run_id, step.step_id)
        if not entries:
            continue
        records, problems = decode_entries(entries)
        settled = step.status is not StepStatus.RUNNING
        report = check(
            records,
            engine_iterations=step.iterations if settled else None,
            unreadable=problems,
            batches={e.seq: e.batch for e in entries if e.batch is not None},
        )
        out.append(StepCheck(step.step_id, report, settled))
    return RunCheck(run, tuple(out))
